package sandboxagent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime/opencode"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
)

// TestLastEventIDIsBounded: the event ids come from the server in the sandbox, which the agent can
// replace, and an id is bounded only by the event size (32 MiB). The runtime keeps the last one per
// sandbox (for Last-Event-ID), for up to MaxClients sandboxes: a huge one must not be kept, nor sent
// back as a header, and neither may one that is no valid header value.
func TestLastEventIDIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name, id, want string
	}{
		{"a sequence number", "42", "42"},
		{"huge", strings.Repeat("9", 1<<20), ""},
		// Go's client refuses a header with a control character: every later subscription would fail.
		{"a control character", "4\x00", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(Config{Secret: "s", Model: opencode.Model{Name: "m"}})
			require.NoError(t, err)
			sb := runtimetest.DialSandbox{Addr: "127.0.0.1:1"}
			const promptID = "tb-prompt-x"
			id, _ := json.Marshal(promptID)
			s := &stream{c: make(chan frame, 1), cancel: func() {}, done: make(chan struct{})}
			s.c <- frame{id: tc.id, msg: message{ID: id, Result: json.RawMessage(`{"stopReason":"end_turn"}`)}}
			_, err = r.follow(t.Context(), sb, &run{ev: s, promptID: promptID}, newTurnState("s1", nil))
			require.NoError(t, err)
			var got string
			r.state.with(sb, func(st *sbState) { got = st.lastEventID })
			require.Equal(t, tc.want, got)
		})
	}
}
