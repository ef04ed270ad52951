package slack

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/bot"
)

// The caps are checked on the sizes Slack announces, before the ack; an event is outside input, so a
// size that cannot be (negative) must not buy room under the per-message cap for the files after it.
func TestInboundCapsAnnouncedSizes(t *testing.T) {
	a := &Adapter{opts: Options{MaxInboundFileBytes: 10, MaxInboundBytes: 15}, log: zap.NewNop()}
	for _, tc := range []struct {
		name  string
		sizes []int64
		used  []string
	}{
		{"within the caps", []int64{5, 10}, []string{"f0", "f1"}},
		{"over the per-file cap", []int64{11, 3}, []string{"f1"}},
		{"over the per-message cap", []int64{10, 6, 5}, []string{"f0", "f2"}},
		{"a negative size", []int64{-1 << 40, 10, 10}, []string{"f1"}},
		{"zero", []int64{0, 10}, []string{"f0", "f1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var list []slackFile
			for i, s := range tc.sizes {
				list = append(list, slackFile{ID: fmt.Sprint("F", i), Name: fmt.Sprint("f", i), Size: s, URLPrivate: "https://files.slack.com/f"})
			}
			raw, err := json.Marshal(list)
			require.NoError(t, err)
			files, notes := a.inbound(event{Files: raw})
			var used []string
			var total int64
			for _, f := range files {
				used = append(used, f.Name)
				total += f.Size
			}
			require.Equal(t, tc.used, used)
			require.LessOrEqual(t, total, a.opts.MaxInboundBytes)
			require.Len(t, notes, len(tc.sizes)-len(used), "every file not used is said")
		})
	}
}

// An event's file list and names are outside input: however many files it lists, the notes stay a
// few lines, and a name cannot break the reply's layout (CR/LF), climb out of input/ (../), or run on
// for pages; the name shown is the one the agent gets.
func TestInboundBoundsHostileLists(t *testing.T) {
	a := &Adapter{opts: Options{MaxInboundFileBytes: 10, MaxInboundBytes: 15}, log: zap.NewNop()}
	long := strings.Repeat("x", 5000)
	list := []slackFile{
		{ID: "F0", Name: "../../etc/passwd", Size: 1, URLPrivate: "https://files.slack.com/a"},
		{ID: "F1", Name: "ok.txt\r\n@channel fake line", Size: 20, URLPrivate: "https://files.slack.com/b"},
		{ID: "F2", Name: long, Size: 1, Mode: "external"},
	}
	for i := range 5000 {
		list = append(list, slackFile{ID: fmt.Sprint("G", i), Name: long, Size: 1, URLPrivate: "https://files.slack.com/c"})
	}
	raw, err := json.Marshal(list)
	require.NoError(t, err)
	files, notes := a.inbound(event{Files: raw})
	require.LessOrEqual(t, len(files), maxInboundFiles)
	require.Equal(t, "passwd", files[0].Name)
	for _, f := range files {
		require.Equal(t, bot.FileName(f.Name), f.Name)
	}
	require.LessOrEqual(t, len(notes), maxInboundFiles+1, "%d notes", len(notes))
	all := strings.Join(notes, "\n")
	require.Less(t, len(all), 8000)
	require.NotContains(t, all, "\r")
	require.Equal(t, len(notes)-1, strings.Count(all, "\n"), "one line per note")
	require.Contains(t, all, "4983 more attachments")
}
