package slack

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
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
