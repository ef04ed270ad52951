package bot

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
)

// pushTurns is a Turns whose Push answers as scripted; the rest is unused by the push command.
type pushTurns struct {
	note string
	err  error
	keys []string
}

func (p *pushTurns) Submit(context.Context, agentpool.Request) (agentpool.Ticket, error) {
	return agentpool.Ticket{}, fmt.Errorf("not used")
}
func (p *pushTurns) Cancel(string) bool                                  { return false }
func (p *pushTurns) Depth(string) int                                    { return 0 }
func (p *pushTurns) Reset(context.Context, string) error                 { return nil }
func (p *pushTurns) Do(string, func(context.Context), func(error)) error { return nil }
func (p *pushTurns) DescribeWorkspace(_ context.Context, t agentpool.WorkspaceThread) string {
	return "Repository: github.com/acme/app, branch threadbox/x, last pushed abc (" + t.ChannelID + ")"
}
func (p *pushTurns) Push(_ context.Context, key string) (string, error) {
	p.keys = append(p.keys, key)
	return p.note, p.err
}

// TestPushCommand: "push" alone in a message pushes the thread and posts the result; failures are
// explained (a workspace's own words, or no repository at all).
func TestPushCommand(t *testing.T) {
	tests := []struct {
		name  string
		turns *pushTurns
		want  string
	}{
		{"pushed", &pushTurns{note: "Pushed abc to threadbox/x. Opened pull request #1: https://example/pull/1"}, "Opened pull request #1"},
		{"no repository", &pushTurns{err: &agentpool.Error{Code: agentpool.EINVALID, Err: agentpool.ErrNoWorkspace}}, "There is nothing to push here"},
		{"the workspace's words", &pushTurns{err: &agentpool.Error{Code: agentpool.EINVALID, Err: &agentpool.WorkspaceError{Text: "acme/app refused the push.", Err: fmt.Errorf("git push: 403")}}}, "Push failed: acme/app refused the push. (ref "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHandler(HandlerConfig{}, tc.turns, nil, nil, nil)
			r := newChatReplier()
			thread := SlackThread("T", "C", "1.1")
			require.NoError(t, h.Handle(t.Context(), Message{Thread: thread, Text: " PUSH ", EventID: "e"}, r))
			got := r.waitPost(t, tc.want)
			require.NotContains(t, got, "403", "git's words stay in the log")
			require.Equal(t, []string{thread.String()}, tc.turns.keys)
			require.NoError(t, h.Wait(t.Context()))
		})
	}
}

func TestStatusShowsTheRepository(t *testing.T) {
	h := NewHandler(HandlerConfig{}, &pushTurns{}, noSessions{}, nil, nil)
	r := newChatReplier()
	require.NoError(t, h.Handle(t.Context(), Message{Thread: SlackThread("T", "C9", "1.1"), ChannelID: "C9", Text: "status", EventID: "e"}, r))
	got := r.waitPost(t, "No sandbox yet")
	require.Contains(t, got, "\nRepository: github.com/acme/app, branch threadbox/x, last pushed abc (C9)")
	require.NoError(t, h.Wait(t.Context()))
}

// noSessions is a Store with no sessions.
type noSessions struct{ Store }

func (noSessions) SessionGet(context.Context, string) (db.Session, error) {
	return db.Session{}, db.ErrNotFound
}
