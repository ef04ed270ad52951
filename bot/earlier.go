package bot

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/threadbox/threadbox/agentpool"
)

// The thread's context: when the bot is first asked in the middle of a chat thread, what the thread
// said before goes into the first prompt. Adapters call Handle before they acknowledge the platform
// and make no Web API call on that path, so the earlier messages are, like attachments, a reference
// taken at once (Earlier.Ref, recorded with the turn) and read only when the turn runs (Earlier.Read,
// or after a takeover the adapter's EarlierReader). The pool reads them only on the thread's first
// turn (agentpool/chatcontext.go), so a later mention costs no call; the adapter applies its caps
// (slack.context_messages, slack.context_chars) with CapEarlier.

// Earlier is the part of a message's thread that came before it.
type Earlier struct {
	// Ref is the adapter's durable reference for EarlierReader.ReadEarlier.
	Ref string
	// Read fetches the earlier messages, capped.
	Read func(ctx context.Context) (EarlierMessages, error)
}

// EarlierMessages is what Read found.
type EarlierMessages struct {
	// Messages are oldest first.
	Messages []EarlierMessage
	// Omitted counts the earlier messages the caps left out.
	Omitted int
}

// EarlierMessage is one message from before.
type EarlierMessage struct {
	Author string
	// Bot marks another integration's post (an alert, a CI report).
	Bot  bool
	At   time.Time
	Text string
}

// EarlierReader is an optional Platform capability: reading a thread's earlier messages in a process
// that did not receive the message (a turn taken over after a crash).
type EarlierReader interface {
	ReadEarlier(ctx context.Context, ref string) (EarlierMessages, error)
}

// EarlierLimits cap the earlier messages a first prompt gets.
type EarlierLimits struct {
	// Messages is the most messages kept; Chars the most characters (runes) of their text.
	Messages, Chars int
}

// On reports whether earlier messages are read at all: both caps are set.
func (l EarlierLimits) On() bool { return l.Messages > 0 && l.Chars > 0 }

// ReadEarlierRef is an adapter's EarlierReader.ReadEarlier, for references that parse into R: a
// reference parse refuses is an error; with reading off (lim) nothing is read; else read reads it.
func ReadEarlierRef[R any](ctx context.Context, ref string, lim EarlierLimits,
	parse func(string) (R, error), read func(context.Context, R) (EarlierMessages, error)) (EarlierMessages, error) {
	r, err := parse(ref)
	if err != nil {
		return EarlierMessages{}, err
	}
	if !lim.On() {
		return EarlierMessages{}, nil
	}
	return read(ctx, r)
}

// WithAttached adds the names of a message's attached files to its text, so the agent knows the
// files were there even though it does not get them.
func WithAttached(text string, files []string) string {
	if len(files) == 0 {
		return text
	}
	return strings.TrimSpace(text + "\n[attached: " + strings.Join(files, ", ") + "]")
}

// minCut is the least text worth keeping of a message cut to fit the character cap.
const minCut = 200

// CapEarlier keeps, of a thread's earlier messages (oldest first; msgs[0] is the thread's first
// message when keepFirst), what fits the limits: the first message, which usually states what the
// thread is about (cut to at most half the characters), then the newest, which say most about
// where it stands. A message too long for what is left is cut, if enough is left to be useful.
// seen is how many earlier messages there were in all (at least len(msgs)); the rest are Omitted.
func CapEarlier(msgs []EarlierMessage, keepFirst bool, seen int, lim EarlierLimits) EarlierMessages {
	seen = max(seen, len(msgs))
	if lim.Messages <= 0 || lim.Chars <= 0 || len(msgs) == 0 {
		return EarlierMessages{Omitted: seen}
	}
	slots, budget := lim.Messages, lim.Chars
	var head []EarlierMessage
	if keepFirst {
		m := msgs[0]
		m.Text = cutText(m.Text, max(budget/2, min(budget, minCut)))
		budget -= utf8.RuneCountInString(m.Text)
		slots--
		head, msgs = []EarlierMessage{m}, msgs[1:]
	}
	var tail []EarlierMessage // newest first
	for i := len(msgs) - 1; i >= 0 && slots > 0 && budget > 0; i-- {
		m := msgs[i]
		n := utf8.RuneCountInString(m.Text)
		if n > budget {
			if budget < minCut {
				break
			}
			m.Text = cutText(m.Text, budget)
			n = budget
		}
		tail = append(tail, m)
		budget -= n
		slots--
	}
	out := head
	for i := len(tail) - 1; i >= 0; i-- {
		out = append(out, tail[i])
	}
	return EarlierMessages{Messages: out, Omitted: seen - len(out)}
}

// cutText cuts s to at most n runes, marking the cut.
func cutText(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= 1 {
		return "…"
	}
	return string([]rune(s)[:n-1]) + "…"
}

// poolContext adapts a read of earlier messages to the pool's request.
func poolContext(read func(ctx context.Context) (EarlierMessages, error)) func(ctx context.Context) (agentpool.ChatContext, error) {
	if read == nil {
		return nil
	}
	return func(ctx context.Context) (agentpool.ChatContext, error) {
		em, err := read(ctx)
		if err != nil {
			return agentpool.ChatContext{}, err
		}
		cc := agentpool.ChatContext{Omitted: em.Omitted}
		for _, m := range em.Messages {
			cc.Messages = append(cc.Messages, agentpool.ChatMessage{Author: m.Author, Bot: m.Bot, At: m.At, Text: m.Text})
		}
		return cc, nil
	}
}

// messageContext is the pool's reader for a message's earlier messages (nil when it has none).
func messageContext(msg Message) func(ctx context.Context) (agentpool.ChatContext, error) {
	if msg.Earlier == nil {
		return nil
	}
	return poolContext(msg.Earlier.Read)
}

// restoredContext is the reader for a recorded turn's earlier messages, through the adapter.
func restoredContext(p Platform, ref string) func(ctx context.Context) (agentpool.ChatContext, error) {
	er, ok := p.(EarlierReader)
	if ref == "" || !ok {
		return nil
	}
	return poolContext(func(ctx context.Context) (EarlierMessages, error) { return er.ReadEarlier(ctx, ref) })
}

// contextNote tells the user what the turn read of the thread ("" when it read nothing).
func contextNote(n agentpool.ContextNote) string {
	switch {
	case n.Failed:
		return "(I could not read the earlier messages of this thread, so I worked from your message alone.)"
	case n.Read == 0:
		return ""
	case n.Omitted > 0:
		return fmt.Sprintf("(I read the %s of this thread before your message; %d older or longer ones did not fit.)", plural(n.Read, "earlier message"), n.Omitted)
	}
	return fmt.Sprintf("(I read the %s of this thread before your message.)", plural(n.Read, "earlier message"))
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
