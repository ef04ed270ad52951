package bot

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool"
)

// CmdRepo chooses the thread's repository: "repo owner/name[@branch] [--force]".
const CmdRepo = "repo"

// ForceFlag lets the repo command move a thread whose sandbox holds work that was not pushed.
const ForceFlag = "--force"

// Mover is an optional capability of the handler's Turns (*agentpool.Pool has it).
type Mover interface {
	Move(req agentpool.MoveRequest, done func(agentpool.MoveResult, error)) error
}

// repoCommand reads a repo command: "repo" alone, or "repo <owner/name[@branch]> [--force]". A
// message that only starts with the word ("repo is broken, fix it") is not one: the argument must
// look like a repository (it has a slash), so prompts keep going to the agent.
func repoCommand(text string) (choice string, force, ok bool) {
	f := strings.Fields(text)
	if len(f) == 0 || !strings.EqualFold(f[0], CmdRepo) {
		return "", false, false
	}
	switch {
	case len(f) == 1:
		return "", false, true
	case len(f) == 2 && strings.Contains(f[1], "/"):
		return f[1], false, true
	case len(f) == 3 && strings.Contains(f[1], "/") && strings.EqualFold(f[2], ForceFlag):
		return f[1], true, true
	case len(f) == 3 && strings.Contains(f[2], "/") && strings.EqualFold(f[1], ForceFlag):
		return f[2], true, true
	}
	return "", false, false
}

// repoHelp is the reply to "repo" alone.
const repoHelp = "Write \"repo owner/name\" or \"repo owner/name@branch\" to choose this thread's repository (before the first message, or later to move the thread: its sandbox is replaced, so push first)."

// repo runs the repo command. The move is queued on the thread's queue at once, before Handle
// returns, so "repo acme/api" followed by a request runs the request in the new repository.
func (h *Handler) repo(ctx context.Context, msg Message, r Replier, choice string, force bool) error {
	key := msg.Thread.String()
	m, ok := h.turns.(Mover)
	if choice == "" || !ok {
		h.reply(ctx, msg, r, CmdRepo, func(ctx context.Context) string {
			if !ok {
				return "Repositories are not set up on this bot."
			}
			line := h.withWorkspace(ctx, msg, "")
			if line == "" {
				return "This thread has no repository. " + repoHelp
			}
			return strings.TrimSpace(line) + "\n" + repoHelp
		})
		return nil
	}
	// Moving replaces the sandbox: a control command, like reset ("… can move it").
	if refusal := h.control(ctx, msg, "move"); refusal != "" {
		h.reply(ctx, msg, r, CmdRepo, func(context.Context) string { return refusal })
		return nil
	}
	cr, first := h.beginCommand(ctx, msg, r, CmdRepo, "")
	if !first {
		return nil
	}
	bg := context.WithoutCancel(ctx)
	answer := func(text string) {
		h.bg.Go(func() {
			ctx, cancel := context.WithTimeout(bg, commandTimeout)
			defer cancel()
			cr.finish(ctx, text)
		})
	}
	done := func(res agentpool.MoveResult, err error) { answer(h.moveText(res, err, choice, key)) }
	req := agentpool.MoveRequest{
		Thread: agentpool.WorkspaceThread{ThreadKey: key, Platform: msg.Thread.Platform, ChannelID: msg.ChannelID, UserID: msg.User.ID, UserName: msg.User.Name},
		Choice: choice, Force: force,
	}
	switch err := m.Move(req, done); {
	case errors.Is(err, agentpool.ErrNoChooser):
		answer("Repositories are not set up on this bot: an operator lists the allowed ones in repos.allow.")
	case err != nil:
		cr.abandon(ctx)
		return fmt.Errorf("%w: %w", ErrNotAccepted, err)
	}
	return nil
}

// moveText words what a repo command did.
func (h *Handler) moveText(res agentpool.MoveResult, err error, choice, key string) string {
	ch := res.Choice
	switch {
	case errors.Is(err, agentpool.ErrUnsaved):
		return fmt.Sprintf("%s Moving this thread to another repository replaces its sandbox, and that work would be lost. "+
			"Push it first (commit, then \"push\"), or write \"repo %s %s\" to move anyway and lose it.", res.Lost, choice, ForceFlag)
	case err != nil:
		return "The repository was not changed: " + Explain(h.log, "repo failed", err, zap.String("thread", key)).String()
	case ch.Same:
		return fmt.Sprintf("This thread already works on %s.", ch.Name)
	case !res.Replaced && ch.Previous == "":
		return fmt.Sprintf("This thread will work on %s: the next message checks it out on the thread's own branch (threadbox/…).", ch.Name)
	case !res.Replaced:
		return fmt.Sprintf("This thread will work on %s instead of %s: the next message checks it out on the thread's own branch (threadbox/…).", ch.Name, ch.Previous)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Moved this thread to %s. Its sandbox was replaced: the next message starts a new one with %s checked out, and the conversation so far is replayed to the agent.", ch.Name, ch.Name)
	if ch.Previous != "" {
		fmt.Fprintf(&b, " What was pushed from %s stays on its branch there.", ch.Previous)
	}
	if res.Lost != "" {
		fmt.Fprintf(&b, " Discarded, as you asked with %s: %s", ForceFlag, res.Lost)
	}
	return b.String()
}
