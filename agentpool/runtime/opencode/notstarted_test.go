package opencode

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
)

// TestRunNotSeenAfterResumeIsCheckedAgain: the event stream dropped before the run showed itself
// (busy), and the resumption found the server idle with no answer of this run: the run was about to
// start, or the server lost it (it restarted after it took the prompt, or before it got to the run).
// The turn follows on, and checks again once startGrace has passed without a sign of the run: a
// server still idle without this run's answer lost it, and the turn is cut (before, it waited on a
// stream that would never report, until the watchdog, ten minutes later); a run that shows itself
// live by then is followed to its end, not cut.
func TestRunNotSeenAfterResumeIsCheckedAgain(t *testing.T) {
	const (
		older      = `{"info":{"id":"msg_01","role":"assistant","time":{"created":1,"completed":2}},"parts":[{"type":"text","text":"an older answer"}]}`
		user       = `{"info":{"id":"msg_02","role":"user","time":{"created":3}},"parts":[{"type":"text","text":"hi"}]}`
		unfinished = `{"info":{"id":"msg_03","role":"assistant","parentID":"msg_02","time":{"created":4}},"parts":[]}`
	)
	silent := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sendEvent(w, "server.connected", `{}`)
		<-r.Context().Done() // a restarted server: this run never reports
	}
	for _, tc := range []struct {
		name     string
		messages string
		// live makes the run show itself as busy from the second status read on, and end once
		// the turn saw it so.
		live bool
	}{
		{name: "the prompt taken, the server restarted before it wrote it: cut", messages: `[` + older + `]`},
		{name: "the server restarted before the run started: cut", messages: `[` + older + `,` + user + `]`},
		{name: "the server restarted as the run started: cut", messages: `[` + older + `,` + user + `,` + unfinished + `]`},
		{name: "a live run slow to show itself: followed to its end", messages: `[` + older + `,` + user + `]`, live: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCutServer()
			c.cutBeforeBusy = true
			c.startGrace = 200 * time.Millisecond
			var reads atomic.Int32
			var ended atomic.Bool
			c.status = func() string {
				if tc.live && reads.Add(1) > 1 && !ended.Load() {
					return `{"` + c.sid + `":{"type":"busy"}}`
				}
				return `{}`
			}
			c.messages = func() string {
				if ended.Load() {
					return c.finished()
				}
				return tc.messages
			}
			c.again = silent
			if tc.live {
				statusBusy := make(chan struct{})
				var once atomic.Bool
				inner := c.status
				c.status = func() string {
					s := inner()
					if s != `{}` && !once.Swap(true) {
						close(statusBusy)
					}
					return s
				}
				c.again = func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					sendEvent(w, "server.connected", `{}`)
					select {
					case <-statusBusy: // the runtime looked again, and saw the run busy: it ends now
					case <-r.Context().Done():
						return
					}
					ended.Store(true)
					sendEvent(w, "session.status", `{"sessionID":"`+c.sid+`","status":{"type":"idle"}}`)
					<-r.Context().Done()
				}
			}
			res, _, err := c.run(t, time.Minute)
			require.Equal(t, int32(1), c.prompts.Load(), "the prompt was sent once")
			if tc.live {
				require.NoError(t, err)
				require.Equal(t, "the answer", res.Answer)
				return
			}
			require.ErrorIs(t, err, runtime.ErrPromptCut)
			require.ErrorIs(t, err, errRunNotShown, "cut by the start grace's look")
			require.Equal(t, runtime.ClassInterrupted, runtime.Classify(err), "%v", err)
		})
	}
}
