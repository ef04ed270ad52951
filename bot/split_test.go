package bot

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestSplitKeepsChunksWithinLimitAndLosesNothing(t *testing.T) {
	long := strings.Repeat("word ", 3000)
	tests := []struct {
		name string
		text string
		max  int
	}{
		{"short", "hello", 100},
		{"paragraphs", strings.Repeat("para one line\n\n", 200), 500},
		{"one huge line", long, 1000},
		{"unicode", strings.Repeat("日本語のテキスト😀\n", 300), 200},
		{"rtl and nul", strings.Repeat("\u202eevil\x00 line\n", 300), 300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chunks := Split(tt.text, tt.max)
			var joined strings.Builder
			for _, c := range chunks {
				require.LessOrEqual(t, utf8.RuneCountInString(c), tt.max)
				require.True(t, utf8.ValidString(c), "never cut inside a rune")
				joined.WriteString(c)
			}
			strip := func(s string) string { return strings.Join(strings.Fields(s), "") }
			require.Equal(t, strip(tt.text), strip(joined.String()), "no content lost")
		})
	}
}

func TestSplitNeverBreaksACodeBlock(t *testing.T) {
	var b strings.Builder
	b.WriteString("intro\n```go\n")
	for range 200 {
		b.WriteString("fmt.Println(\"hello world\")\n")
	}
	b.WriteString("```\noutro\n")
	chunks := Split(b.String(), 400)
	require.Greater(t, len(chunks), 3)
	for i, c := range chunks {
		require.LessOrEqual(t, utf8.RuneCountInString(c), 400)
		require.Equal(t, 0, strings.Count(c, "```")%2, "chunk %d has balanced fences:\n%s", i, c)
		if i > 0 && i < len(chunks)-1 {
			require.True(t, strings.HasPrefix(c, "```go\n"), "reopened with its language")
		}
	}
}

func TestLayoutAnswerAttachesVeryLongAnswers(t *testing.T) {
	text := strings.Repeat("line of text\n", 2000)
	l := LayoutAnswer(text, Limits{MaxMessage: 1000, MaxChunks: 4})
	require.Len(t, l.Chunks, 1)
	require.Contains(t, l.Chunks[0], "answer.md")
	require.Equal(t, text, string(l.File))
	require.LessOrEqual(t, utf8.RuneCountInString(l.Chunks[0]), 1000)

	short := LayoutAnswer("hi", Limits{MaxMessage: 1000, MaxChunks: 4})
	require.Equal(t, []string{"hi"}, short.Chunks)
	require.Nil(t, short.File)
	require.Equal(t, []string{"(no answer)"}, LayoutAnswer("  ", Limits{}).Chunks)
}

func TestThreadKeyRoundTrip(t *testing.T) {
	for _, k := range []ThreadKey{
		SlackThread("T1", "C1", "1700000000.000100"), SlackDM("T1", "U1"),
		DiscordThread("G1", "123"), DiscordDM("U9"), WebThread("abc"),
	} {
		got, err := ParseThreadKey(k.String())
		require.NoError(t, err)
		require.Equal(t, k, got)
	}
	require.Equal(t, "slack:T1:dm:U1", SlackDM("T1", "U1").String())
	require.True(t, SlackDM("T1", "U1").IsDM())
	for _, bad := range []string{"", "slack:T", "web:", "irc:x:y", "slack::C:1"} {
		_, err := ParseThreadKey(bad)
		require.Error(t, err, bad)
	}
}
