package agentpool

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/threadbox/threadbox/db"
)

// handoffMax bounds the hand-off note kept on the session.
const handoffMax = 600

// history builds the replay for a new sandbox or agent session: the hand-off note, then the newest
// finished turns (oldest first, newest last) within the configured caps.
func (p *Pool) history(ctx context.Context, sess db.Session) (string, error) {
	lim := p.cfg.Transcript
	lim.AfterID = sess.ResetTurnID
	turns, err := p.store.TurnTranscript(ctx, sess.ThreadKey, lim)
	if err != nil {
		return "", fmt.Errorf("loading the thread's history: %w", err)
	}
	return FormatHistory(sess.HandoffNote, turns, p.cfg.Transcript.MaxChars), nil
}

// FormatHistory renders a replay. Turns are given oldest first; if the whole does not fit in maxChars,
// the oldest turns go first, because the newest say most about what the user wants now.
func FormatHistory(note string, turns []db.Turn, maxChars int) string {
	if note == "" && len(turns) == 0 {
		return ""
	}
	head := "This conversation continues in a fresh workspace: earlier files may be gone. What happened so far:\n"
	if note != "" {
		head += "\nLast hand-off note:\n" + note + "\n"
	}
	var blocks []string
	for _, t := range turns {
		b := fmt.Sprintf("\nUser: %s\nAssistant: %s\n", t.Prompt, t.Answer)
		if t.Status != db.TurnDone && t.Error != "" {
			b = fmt.Sprintf("\nUser: %s\n(turn %s: %s)\n", t.Prompt, t.Status, t.Error)
		}
		blocks = append(blocks, b)
	}
	size := utf8.RuneCountInString(head)
	start := len(blocks)
	for start > 0 {
		n := utf8.RuneCountInString(blocks[start-1])
		if maxChars > 0 && size+n > maxChars {
			break
		}
		size += n
		start--
	}
	return head + strings.Join(blocks[start:], "")
}

// handoffNote is the short summary of the last turn kept on the session.
func handoffNote(prompt, answer string) string {
	return truncate(fmt.Sprintf("Last request: %s\nLast answer: %s", truncate(prompt, handoffMax/3), answer), handoffMax)
}

// truncate cuts s to at most n runes, marking the cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
