package sandboxagent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/opencode"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
)

// TestServerRestartedBeforeThePromptIsCut: sandbox-agent restarts after the turn's barrier and before
// its prompt's POST, which carries ?agent= and so creates the ACP server anew: the turn's stream ends,
// and the new server's event ids start over, below the last one the turn saw. The turn must not wait
// for ever (it subscribed again after its last id and skipped the new server's events, the prompt's
// response among them, as seen already): it finds the server created anew and ends as cut, with the
// prompt sent once.
func TestServerRestartedBeforeThePromptIsCut(t *testing.T) {
	f := newACPFake()
	f.gen.Store(1_700_000_000_000)
	for i := range 3 { // an earlier turn's events: the barrier's echo is event 4
		f.push(chunk(fmt.Sprint("earlier ", i)))
	}
	f.restartOnPrompt = true
	f.onPrompt = func(f *acpFake, id json.RawMessage, w http.ResponseWriter, r *http.Request) {
		f.push(chunk("Done.")) // events 1 and 2 of the new server
		f.push(endTurn(id))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, endTurn(id))
	}
	_, err := f.prompt(t, time.Minute)
	require.ErrorIs(t, err, runtime.ErrPromptCut)
	require.ErrorIs(t, err, errServerRestarted)
	require.Equal(t, runtime.ClassInterrupted, runtime.Classify(err), "%v", err)
	require.Equal(t, int32(1), f.prompts.Load(), "the prompt was sent once")
}

// TestEventIDsStartingOverAreCut: an event id below the last one seen is no replay (the server replays
// only what follows Last-Event-ID): it is a new server's sequence, found even where the server's
// generation cannot be checked. The turn is cut rather than skip it as seen; an id equal to the last
// one (a replay of it) is still skipped.
func TestEventIDsStartingOverAreCut(t *testing.T) {
	const promptID = "tb-prompt-x"
	id, _ := json.Marshal(promptID)
	end := message{ID: id, Result: json.RawMessage(`{"stopReason":"end_turn"}`)}
	update := func(text string) message {
		var m message
		require.NoError(t, json.Unmarshal([]byte(chunk(text)), &m))
		return m
	}
	for _, tc := range []struct {
		name       string
		frames     []frame
		wantAnswer string
	}{
		{"the last event replayed: skipped", []frame{{"4", update("again")}, {"5", update("fresh")}, {"6", end}}, "fresh"},
		{"ids started over: cut", []frame{{"1", update("new server")}, {"2", end}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(Config{Secret: "s", Model: opencode.Model{Name: "m"}})
			require.NoError(t, err)
			s := &stream{c: make(chan frame, len(tc.frames)), cancel: func() {}, done: make(chan struct{})}
			for _, f := range tc.frames {
				s.c <- f
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // only so that a regression fails rather than hangs
			defer cancel()
			turn := newTurnState("s1", nil)
			_, err = r.follow(ctx, runtimetest.DialSandbox{Addr: "127.0.0.1:1"}, &run{ev: s, promptID: promptID, last: "4"}, turn)
			if tc.wantAnswer != "" {
				require.NoError(t, err)
				require.Equal(t, tc.wantAnswer, turn.answer())
				return
			}
			require.ErrorIs(t, err, runtime.ErrPromptCut)
			require.Equal(t, runtime.ClassInterrupted, runtime.Classify(err), "%v", err)
		})
	}
}
