package bot

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/agentpool/runtime"
)

func TestLimitErrorsReadAsLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want []string
	}{
		{"memory", &agentpool.LimitError{Kind: agentpool.LimitMemory, LimitMB: 512},
			[]string{"hit the 512 MiB memory limit", "sandbox.resources.memory_mb"}},
		{"disk, stopped", fmt.Errorf("turn: %w", &agentpool.LimitError{Kind: agentpool.LimitDisk, LimitMB: 1024, UsedKB: 1200 << 10, Stopped: true}),
			[]string{"over its 1024 MiB disk limit", "1.2 GiB", "stopped the turn", `"reset"`}},
		{"disk, after the turn", &agentpool.LimitError{Kind: agentpool.LimitDisk, LimitMB: 1024, UsedKB: 1100 << 10},
			[]string{"is over its 1024 MiB disk limit", "Delete files"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Explain(nil, "turn failed", tc.err)
			require.Equal(t, agentpool.ELIMIT, p.Code)
			require.Empty(t, p.Ref, "nothing to look up")
			got := p.String()
			for _, w := range tc.want {
				require.Contains(t, got, w)
			}
		})
	}
}

// TestStatusNotesAreWordedHere: the pool reports its status notes as facts, and the progress
// headline says them in words; a runtime's own status text is shown as it is.
func TestStatusNotesAreWordedHere(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   runtime.Event
		want string
	}{
		{"in line", runtime.Event{Kind: runtime.EventStatus, Note: agentpool.NoteInLine, Place: 3, Max: 5},
			"at capacity: all 5 sandboxes are busy; you are number 3 in line"},
		{"provider outage", runtime.Event{Kind: runtime.EventStatus, Note: agentpool.NoteWaitingForProvider},
			"waiting for the sandbox service"},
		{"reading the thread", runtime.Event{Kind: runtime.EventStatus, Note: agentpool.NoteReadingThread},
			"reading the thread…"},
		{"a runtime's own words", runtime.Event{Kind: runtime.EventStatus, Text: "model API busy, retrying: overloaded"},
			"model API busy, retrying: overloaded"},
		{"a note not known here", runtime.Event{Kind: runtime.EventStatus, Note: "some_new_note"}, "working…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newReplySink(t.Context(), newChatReplier(), time.Hour, zap.NewNop())
			s.Progress(tc.ev)
			s.mu.Lock()
			defer s.mu.Unlock()
			require.Equal(t, tc.want, s.status)
		})
	}
}
