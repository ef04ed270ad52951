package slack

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/bot/slack/slackfake"
)

// The hostile answer of issue 10, laid out with this adapter's own limits: it once made bot.Split
// loop until the process was killed at 24 GB.
func TestHostileFenceLineFitsSlackMessages(t *testing.T) {
	hostile := "```" + strings.Repeat("a", 3492) + "\nx\n"
	l := bot.LayoutAnswer(hostile, bot.Limits{MaxMessage: maxMessage, MaxChunks: maxChunks})
	require.Nil(t, l.File)
	require.Len(t, l.Chunks, 2)
	for i, c := range l.Chunks {
		require.LessOrEqual(t, utf8.RuneCountInString(c), maxMessage, "chunk %d", i)
		require.Zero(t, strings.Count(c, "```")%2, "chunk %d has balanced fences", i)
	}
}

// TestE2EHostileFenceLine sends issue 10's command through the real stack (shell runtime, Docker): the
// answer arrives in messages within Slack's limit, each with balanced fences, and the thread's next
// message is answered.
func TestE2EHostileFenceLine(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ev := s.fake.Mention("C7", "U1", `printf '`+"```"+`%s\n%s\n' "$(head -c 3492 /dev/zero | tr '\0' a)" x`)
	s.deliver(t, ev)
	require.Equal(t, bot.ReactDone, s.waitDone(t, "C7", ev.TS))

	var text strings.Builder
	for _, m := range s.fake.Replies("C7", ev.TS) {
		if m.BotID == "" {
			continue
		}
		require.LessOrEqual(t, utf8.RuneCountInString(m.Text), maxMessage)
		require.Zero(t, strings.Count(m.Text, "```")%2, "balanced fences in %q", m.Text[:min(len(m.Text), 80)])
		text.WriteString(m.Text)
	}
	require.Equal(t, 3492, strings.Count(text.String(), "a"), "the whole line arrived")

	next := s.fake.Mention("C7", "U1", "echo still-here", slackfake.InThread(ev.TS))
	s.deliver(t, next)
	require.Equal(t, bot.ReactDone, s.waitDone(t, "C7", next.TS))
	require.Len(t, answers(s.fake, "C7", ev.TS, regexp.MustCompile(`^still-here$`)), 1)
}
