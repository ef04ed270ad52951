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

// budgetThread is a thread's token budget used up, as the gateway reports it.
var budgetThread = &runtime.BudgetError{Scope: runtime.ScopeThread, Limit: 15, Used: 15}

// TestBudgetRefusalsReadAsBudgets: the gateway's refusal reaches the user in words, with its numbers
// and when it renews; it is no fault, so there is nothing to look up.
func TestBudgetRefusalsReadAsBudgets(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"thread tokens", budgetThread,
			"This thread has used its model budget (15 of 15 tokens). Start a new thread to go on."},
		{"user tokens", fmt.Errorf("prompt: %w", &runtime.BudgetError{Scope: runtime.ScopeUser, Limit: 1000, Used: 1002}),
			"You have used your model budget for today (1002 of 1000 tokens). It renews at midnight UTC."},
		{"deployment tokens", &runtime.BudgetError{Scope: runtime.ScopeDay, Limit: 50, Used: 50},
			"The bot has used its model budget for today (50 of 50 tokens). It renews at midnight UTC."},
		{"user money", &runtime.BudgetError{Scope: runtime.ScopeUser, Limit: 105, Used: 105, Money: true, Currency: "USD"},
			"You have used your model budget for today (0.000105 of 0.000105 USD). It renews at midnight UTC."},
		{"deployment money", &runtime.BudgetError{Scope: runtime.ScopeDay, Limit: 2_000_000, Used: 2_012_345, Money: true, Currency: "EUR"},
			"The bot has used its model budget for today (2.01 of 2.00 EUR). It renews at midnight UTC."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Explain(nil, "turn refused", tc.err)
			require.Equal(t, agentpool.EBUDGET, p.Code)
			require.Equal(t, agentpool.EBUDGET, agentpool.ErrorCode(tc.err), "the pool's codes know it too")
			require.Empty(t, p.Ref, "nothing to look up")
			require.Equal(t, tc.want, p.String())
			require.Equal(t, 429, p.HTTPStatus())
		})
	}
}

// TestNoPublicURLSaysWhatToSet: a turn the gateway cannot serve on a cloud sandbox says whom to ask
// and what to set, as a reply (the refusal) or as a failure (Ensure's error), with a ref.
func TestNoPublicURLSaysWhatToSet(t *testing.T) {
	want := "This thread's sandbox runs in the cloud (deno), and the bot's model gateway has no public URL for it to reach: ask the operator to set gateway.public_url."
	ne := &runtime.NoPublicURLError{Provider: "deno"}
	p := Explain(nil, "turn failed", &agentpool.Error{Code: agentpool.ERUNTIME, Op: "ensure runtime", Err: ne})
	require.Equal(t, agentpool.ERUNTIME, p.Code)
	require.Equal(t, want, p.Text)
	require.NotEmpty(t, p.Ref)

	r := newChatReplier()
	s := newReplySink(t.Context(), r, time.Millisecond, zap.NewNop())
	_, err := s.Deliver(t.Context(), agentpool.Outcome{Answer: ne.Error(), IsError: true, Refusal: ne})
	require.NoError(t, err)
	require.Len(t, r.posts, 1)
	require.Equal(t, want+" (ref "+refOf(r.posts[0])+")", r.posts[0])
}
