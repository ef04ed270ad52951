package bot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
)

// CmdUse picks the thread's sandbox provider: "use <provider>" alone in a message.
const CmdUse = "use"

// ProviderChooser is an optional capability of the handler's Turns (*agentpool.Pool has it): the
// deployment's providers (sandbox.providers) and a thread's choice among them.
type ProviderChooser interface {
	Providers() []string
	DefaultProvider() string
	UseProvider(ctx context.Context, t agentpool.WorkspaceThread, name string) (agentpool.ProviderChange, error)
}

// ProviderMover is an optional capability of AdminOps (agentpool.Ops has it): admin move.
type ProviderMover interface {
	MoveProvider(ctx context.Context, threadKey, name string) (agentpool.ProviderChange, error)
}

// KnownProviders are the sandbox providers Threadbox has (config's list, less "auto"): "use <one of
// them>" is the command even where the deployment does not enable it, so the user is told so.
var KnownProviders = []string{"docker", "local", "daytona", "deno"}

// isUse reports whether word (lower-cased) is the use command: "use" alone, or with the name of a
// provider known or enabled. Any other "use <word>" ("use pnpm") is a request for the agent.
func isUse(word string, enabled []string) bool {
	return isChoice(word, CmdUse, KnownProviders, enabled)
}

// isChoice reports whether word is cmd alone or cmd followed by one of the names in known or enabled.
func isChoice(word, cmd string, known, enabled []string) bool {
	f := strings.Fields(word)
	switch {
	case len(f) == 0 || f[0] != cmd:
		return false
	case len(f) == 1:
		return true
	}
	return len(f) == 2 && (slices.Contains(known, f[1]) || slices.Contains(enabled, f[1]))
}

// providerNames is the deployment's enabled providers (none when it has no choice).
func (h *Handler) providerNames() []string {
	if pc, ok := h.turns.(ProviderChooser); ok {
		return pc.Providers()
	}
	return nil
}

// use runs "use <provider>" off the adapter's call; the pool orders it among the thread's turns.
func (h *Handler) use(ctx context.Context, msg Message, text string) func(ctx context.Context) string {
	pc, ok := h.turns.(ProviderChooser)
	if !ok {
		return func(context.Context) string { return "This bot runs one sandbox provider; there is nothing to choose." }
	}
	return h.choose(msg, text, threadChoice{
		cmd: CmdUse, verb: CmdUse, enabled: pc.Providers, def: pc.DefaultProvider, choose: pc.UseProvider,
		usage: "Write \"use <provider>\" to pick where this thread's sandbox runs. ",
		list:  enabledProvidersText,
		unknown: func(err error) ([]string, bool) {
			var u *agentpool.UnknownProviderError
			if errors.As(err, &u) {
				return u.Enabled, true
			}
			return nil, false
		},
		unknownText: "There is no sandbox provider %q here. ",
		destroyFailed: func(ch agentpool.ProviderChange, why string) string {
			return fmt.Sprintf("This thread now runs on %s, but its sandbox on %s could not be destroyed yet: %s. It is retried; the next message starts on %s with the conversation so far replayed.",
				ch.To, ch.From, why, ch.To)
		},
		failed: "Switching providers failed: ",
		done:   ProviderChangeText,
	})
}

// threadChoice is one of the thread's choices among what the deployment enables: its sandbox
// provider ("use") or its agent runtime ("runtime"). Both run the same way (choose); these are the
// calls and the words that differ.
type threadChoice struct {
	cmd string
	// verb is what the owner-only refusal says the user may not do ("use" it).
	verb          string
	enabled       func() []string
	def           func() string
	choose        func(ctx context.Context, t agentpool.WorkspaceThread, name string) (agentpool.ProviderChange, error)
	usage         string
	list          func(enabled []string, def string) string
	unknown       func(err error) (enabled []string, ok bool)
	unknownText   string
	destroyFailed func(ch agentpool.ProviderChange, why string) string
	failed        string
	done          func(agentpool.ProviderChange) string
}

// choose runs a thread choice command: alone it lists what may be chosen; with a name it checks the
// user may, makes the choice through the pool (which orders it among the thread's turns) and says
// what it did, or lists what is enabled when the name is not.
func (h *Handler) choose(msg Message, text string, c threadChoice) func(ctx context.Context) string {
	return func(ctx context.Context) string {
		f := strings.Fields(text)
		if len(f) < 2 {
			return c.usage + c.list(c.enabled(), c.def())
		}
		name := strings.ToLower(f[1])
		if refusal := h.control(ctx, msg, c.verb); refusal != "" {
			return refusal
		}
		key := msg.Thread.String()
		ch, err := c.choose(ctx, agentpool.WorkspaceThread{ThreadKey: key, Platform: msg.Thread.Platform,
			ChannelID: msg.ChannelID, UserID: msg.User.ID, UserName: msg.User.Name}, name)
		if enabled, ok := c.unknown(err); ok {
			return fmt.Sprintf(c.unknownText, name) + c.list(enabled, c.def())
		}
		switch {
		case err != nil && ch.Moved:
			return c.destroyFailed(ch, Explain(h.log, c.cmd+": destroying the old sandbox failed", err, zap.String("thread", key)).String())
		case err != nil:
			return c.failed + Explain(h.log, c.cmd+" failed", err, zap.String("thread", key)).String()
		}
		return c.done(ch)
	}
}

// ProviderChangeText says what a provider choice did, for "use" and "admin move".
func ProviderChangeText(ch agentpool.ProviderChange) string {
	switch {
	case ch.Unchanged:
		return fmt.Sprintf("This thread already runs on %s.", ch.To)
	case ch.Moved:
		return fmt.Sprintf("Moved this thread from %s to %s: its sandbox on %s was destroyed (with any files in it), and the next message starts a new one on %s with the conversation so far replayed.",
			ch.From, ch.To, ch.From, ch.To)
	case ch.Replay:
		return fmt.Sprintf("This thread now runs on %s: the next message starts a sandbox there with the conversation so far replayed.", ch.To)
	}
	return fmt.Sprintf("This thread will run on %s.", ch.To)
}

// enabledProvidersText lists the providers a thread may pick.
func enabledProvidersText(enabled []string, def string) string {
	return "Enabled providers: " + strings.Join(markDefault(enabled, def), ", ") + "."
}

// markDefault marks the default among enabled names.
func markDefault(enabled []string, def string) []string {
	names := make([]string, len(enabled))
	for i, n := range enabled {
		names[i] = n
		if n == def {
			names[i] += " (default)"
		}
	}
	return names
}

// withProvider adds status's line about the thread's provider, when the deployment has a choice.
func (h *Handler) withProvider(ctx context.Context, msg Message, status string) string {
	pc, ok := h.turns.(ProviderChooser)
	if !ok || len(pc.Providers()) < 2 {
		return status
	}
	name := pc.DefaultProvider()
	if s, err := h.store.SessionGet(ctx, msg.Thread.String()); err == nil && s.Provider != "" {
		name = s.Provider
	}
	return fmt.Sprintf("%s\nThis thread runs on %s. %s Switch with \"use <provider>\".", status, name,
		enabledProvidersText(pc.Providers(), pc.DefaultProvider()))
}

// move is admin move <thread> <provider>.
func (a *Admin) move(ctx context.Context, args []string) (string, error) {
	if len(args) != 2 {
		return "", badRequest("usage: move <thread> <provider>")
	}
	key, err := threadArg(args[0])
	if err != nil {
		return "", err
	}
	mv, ok := a.ops.(ProviderMover)
	if !ok {
		return "", badRequest("move: this bot runs one sandbox provider")
	}
	ch, err := mv.MoveProvider(ctx, key, strings.ToLower(args[1]))
	var unknown *agentpool.UnknownProviderError
	switch {
	case errors.As(err, &unknown):
		return "", badRequest("move: no sandbox provider %q here; enabled: %s", unknown.Name, strings.Join(unknown.Enabled, ", "))
	case errors.Is(err, db.ErrNotFound):
		return "", badRequest("move: no session for thread %s", key)
	case err != nil:
		return "", err
	}
	return key + ": " + ProviderChangeText(ch), nil
}
