package bot

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// slackMaxMessage is bot/slack's chunk limit (its maxMessage), which bot cannot import.
const slackMaxMessage = 3500

// requireSplit checks Split's contract on one input: chunks within the limit, an even number of
// fence lines in each, added fences only where a block spans a cut, and bodies that are the text
// itself, in order, but for newlines at the cuts.
func requireSplit(t testing.TB, text string, max int) []string {
	t.Helper()
	limit := max
	if limit < MinChunk {
		limit = MinChunk
	}
	cs := splitChunks(text, max)
	out := Split(text, max)
	require.Len(t, out, len(cs))
	rest := text
	for i, c := range cs {
		s := c.String()
		require.Equal(t, s, out[i])
		require.LessOrEqual(t, utf8.RuneCountInString(s), limit, "chunk %d too long", i)
		require.Zero(t, fenceLines(s)%2, "chunk %d has unbalanced fences:\n%s", i, s)
		if utf8.ValidString(text) {
			require.True(t, utf8.ValidString(s), "chunk %d cut inside a rune", i)
		}
		require.NotEmpty(t, c.body)
		require.False(t, strings.HasPrefix(c.body, "\n") || strings.HasSuffix(c.body, "\n"), "chunk %d body keeps a cut's newlines", i)
		if c.open != "" {
			require.True(t, isFence(c.open) && strings.Count(c.open, "\n") == 1 && strings.HasSuffix(c.open, "\n"), "chunk %d opens with %q", i, c.open)
		}
		switch {
		case i == 0:
			require.Empty(t, c.open, "the first chunk starts outside any block")
		default:
			require.Equal(t, cs[i-1].closed, c.open != "", "chunk %d reopens exactly when chunk %d closed a block", i, i-1)
		}
		rest = strings.TrimLeft(rest, "\n")
		require.True(t, strings.HasPrefix(rest, c.body), "chunk %d body is not the text's next piece:\nbody %q\nrest %q", i, c.body, rest[:min(len(rest), 200)])
		rest = rest[len(c.body):]
	}
	require.Empty(t, strings.TrimLeft(rest, "\n"), "text left over after the last chunk")
	return out
}

func fenceLines(s string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if isFence(l) {
			n++
		}
	}
	return n
}

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
		{"invalid utf-8", strings.Repeat("\xff\xfe abc\n", 300), 100},
		{"unclosed block", "intro\n```sh\n" + strings.Repeat("echo hi\n", 100), 120},
		{"fence lines only", strings.Repeat("```\n", 500), 16},
		{"long fence line", "```" + strings.Repeat("a", 100) + "\ncode\n```", 20},
		{"indented fence cut before its backticks", "    " + strings.Repeat(" ", 30) + "```x\ny\n```", 16},
		{"backticks after the cut", strings.Repeat("b", 12) + "```" + strings.Repeat("c", 40), 16},
		{"crlf", strings.Repeat("line\r\n", 200), 50},
		{"newlines only between", "a" + strings.Repeat("\n", 100) + "b", 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireSplit(t, tt.text, tt.max)
		})
	}
}

func TestSplitBelowMinChunkUsesMinChunk(t *testing.T) {
	for _, max := range []int{-1, 0, 1, 5, MinChunk - 1} {
		chunks := requireSplit(t, "```go\n"+strings.Repeat("x := 1\n", 20)+"```", max)
		for _, c := range chunks {
			require.LessOrEqual(t, utf8.RuneCountInString(c), MinChunk)
		}
	}
}

func TestSplitEmptyTextGivesNoChunk(t *testing.T) {
	require.Empty(t, Split("", 100))
	require.Empty(t, Split("\n\n\n", 100))
	require.Equal(t, []string{"hi"}, Split("\nhi\n", 100))
}

func TestSplitNeverBreaksACodeBlock(t *testing.T) {
	var b strings.Builder
	b.WriteString("intro\n```go\n")
	for range 200 {
		b.WriteString("fmt.Println(\"hello world\")\n")
	}
	b.WriteString("```\noutro\n")
	chunks := requireSplit(t, b.String(), 400)
	require.Greater(t, len(chunks), 3)
	for i, c := range chunks {
		require.Equal(t, 0, strings.Count(c, "```")%2, "chunk %d has balanced fences:\n%s", i, c)
		if i > 0 && i < len(chunks)-1 {
			require.True(t, strings.HasPrefix(c, "```go\n"), "reopened with its language")
		}
	}
}

// The hostile answer of issue 10: a code block whose first line nearly fills a Slack message. The
// old splitter reopened the block with that line as its language and looped without consuming input.
func TestSplitHostileFenceLineAtSlackLimit(t *testing.T) {
	line := "```" + strings.Repeat("a", 3492)
	chunks := requireSplit(t, line+"\nx\n", slackMaxMessage)
	require.Equal(t, []string{line + "\n```", "```\nx\n```"}, chunks, "the 3,492-character tag is no language to repeat")
}

// The fuzzer's minimal input for the same loop.
func TestSplitFuzzerMinimalLoop(t *testing.T) {
	chunks := requireSplit(t, "00\n```00000000000000\n", 20)
	require.Equal(t, []string{"00", "```0000000000000\n```", "```\n0\n```"}, chunks)
}

func TestSplitIsLinearOnAHugeLine(t *testing.T) {
	// Quadratic rune slicing of the rest of the line would take minutes here.
	text := strings.Repeat("é", 10<<20)
	chunks := Split(text, slackMaxMessage)
	// A piece of a long line keeps room for a closing fence: 4 runes short of the limit.
	require.Equal(t, (10<<20+slackMaxMessage-5)/(slackMaxMessage-4), len(chunks))
	require.True(t, text == strings.Join(chunks, ""), "the pieces make up the line")
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

func TestLayoutAnswerHostileFenceLine(t *testing.T) {
	text := "```" + strings.Repeat("a", 3492) + "\nx\n"
	for _, lim := range []Limits{
		{MaxMessage: slackMaxMessage, MaxChunks: 4},
		{MaxMessage: slackMaxMessage, MaxChunks: 1},
		{MaxMessage: 40, MaxChunks: 1}, // no room for the note
	} {
		requireLayout(t, text, lim)
	}
}

func requireLayout(t testing.TB, text string, lim Limits) Layout {
	t.Helper()
	l := LayoutAnswer(text, lim)
	limit := lim.MaxMessage
	if limit <= 0 {
		limit = DefaultMaxMessage
	}
	limit = max(limit, MinChunk)
	require.NotEmpty(t, l.Chunks)
	for i, c := range l.Chunks {
		require.LessOrEqual(t, utf8.RuneCountInString(c), limit, "chunk %d too long", i)
		require.Zero(t, fenceLines(c)%2, "chunk %d has unbalanced fences", i)
	}
	if l.File != nil {
		require.Equal(t, text, string(l.File))
		require.Len(t, l.Chunks, 1)
	} else if lim.MaxChunks > 0 {
		require.LessOrEqual(t, len(l.Chunks), lim.MaxChunks)
	}
	return l
}

// FuzzSplit checks Split's whole contract (requireSplit) on any text and limit.
func FuzzSplit(f *testing.F) {
	f.Add("00\n```00000000000000\n", 20)
	f.Add("```"+strings.Repeat("a", 3492)+"\nx\n", slackMaxMessage)
	f.Add("intro\n```go\nfmt.Println()\n```\noutro", 16)
	f.Add("日本語\n```\n\n\n```", 17)
	f.Fuzz(func(t *testing.T, text string, max int) {
		requireSplit(t, text, max)
	})
}

// FuzzLayoutAnswer checks LayoutAnswer's bounds on any text and limits.
func FuzzLayoutAnswer(f *testing.F) {
	f.Add("00\n```00000000000000\n", 20, 1)
	f.Add(strings.Repeat("line\n", 100), 50, 2)
	f.Add("  ", 0, 0)
	f.Fuzz(func(t *testing.T, text string, maxMessage, maxChunks int) {
		requireLayout(t, text, Limits{MaxMessage: maxMessage, MaxChunks: maxChunks})
	})
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
