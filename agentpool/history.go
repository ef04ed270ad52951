package agentpool

import (
	"cmp"
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/prompts"
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

// FormatHistory renders a replay (prompts.Replay). Turns are given oldest first; if they do not all fit
// in maxChars, the oldest go first, because the newest say most about what the user wants now.
func FormatHistory(note string, turns []db.Turn, maxChars int) string {
	size := utf8.RuneCountInString(note)
	start := len(turns)
	for start > 0 {
		t := turns[start-1]
		n := utf8.RuneCountInString(t.Prompt) + utf8.RuneCountInString(t.Answer) + utf8.RuneCountInString(t.Error)
		if maxChars > 0 && size+n > maxChars {
			break
		}
		size += n
		start--
	}
	data := prompts.ReplayData{Note: note}
	for _, t := range turns[start:] {
		pt := prompts.Turn{User: t.Prompt, Assistant: t.Answer}
		if t.Status != db.TurnDone {
			pt.Failed = cmp.Or(t.Error, string(t.Status))
		}
		data.Turns = append(data.Turns, pt)
	}
	return prompts.Replay(data)
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
