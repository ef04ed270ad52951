package bot

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
)

func TestRepoCommandParse(t *testing.T) {
	tests := []struct {
		text, choice string
		force, ok    bool
	}{
		{"repo", "", false, true},
		{"  REPO  ", "", false, true},
		{"repo acme/api", "acme/api", false, true},
		{"repo acme/api@dev --force", "acme/api@dev", true, true},
		{"repo --force acme/api", "acme/api", true, true},
		{"repo github.example/acme/api", "github.example/acme/api", false, true},
		// Prompts that start with the word stay prompts.
		{"repo is broken, fix it", "", false, false},
		{"repo acme/api and then fix the tests", "", false, false},
		{"repository acme/api", "", false, false},
		{"repo acme", "", false, false},
		{"repo acme/api --please", "", false, false},
	}
	for _, tc := range tests {
		choice, force, ok := repoCommand(tc.text)
		require.Equal(t, []any{tc.choice, tc.force, tc.ok}, []any{choice, force, ok}, tc.text)
	}
}

// moveTurns is a Turns whose Move answers as scripted.
type moveTurns struct {
	pushTurns
	res agentpool.MoveResult
	err error
	// queueErr is Move's own error (not queued).
	queueErr error
	reqs     []agentpool.MoveRequest
}

func (m *moveTurns) Move(req agentpool.MoveRequest, done func(agentpool.MoveResult, error)) error {
	if m.queueErr != nil {
		return m.queueErr
	}
	m.reqs = append(m.reqs, req)
	go done(m.res, m.err)
	return nil
}

// TestRepoCommandReplies: each outcome of a move is worded for the user; the move is queued before
// Handle returns, with the thread and the force flag.
func TestRepoCommandReplies(t *testing.T) {
	lib := agentpool.Choice{Name: "github.com/acme/lib"}
	moved := agentpool.Choice{Name: "github.com/acme/lib", Previous: "github.com/acme/app"}
	unsaved := &agentpool.Error{Code: agentpool.EINVALID, Err: &agentpool.WorkspaceError{Text: "The sandbox's checkout has 1 commit not pushed (branch threadbox/x).", Err: agentpool.ErrUnsaved}}
	tests := []struct {
		name, text string
		turns      *moveTurns
		want       string
	}{
		{"first choice", "repo acme/lib", &moveTurns{res: agentpool.MoveResult{Choice: lib}}, "This thread will work on github.com/acme/lib: the next message checks it out"},
		{"same", "repo acme/lib", &moveTurns{res: agentpool.MoveResult{Choice: agentpool.Choice{Name: "github.com/acme/lib", Same: true}}}, "This thread already works on github.com/acme/lib."},
		{"moved", "repo acme/lib", &moveTurns{res: agentpool.MoveResult{Choice: moved, Replaced: true}},
			"Moved this thread to github.com/acme/lib. Its sandbox was replaced: the next message starts a new one with github.com/acme/lib checked out, and the conversation so far is replayed to the agent. What was pushed from github.com/acme/app stays on its branch there."},
		{"forced", "repo acme/lib --force", &moveTurns{res: agentpool.MoveResult{Choice: moved, Replaced: true, Lost: "The sandbox's checkout has 2 commits not pushed."}},
			"Discarded, as you asked with --force: The sandbox's checkout has 2 commits not pushed."},
		{"refused", "repo acme/lib", &moveTurns{res: agentpool.MoveResult{Choice: moved, Lost: "The sandbox's checkout has 1 commit not pushed (branch threadbox/x)."}, err: unsaved},
			"The sandbox's checkout has 1 commit not pushed (branch threadbox/x). Moving this thread to another repository replaces its sandbox, and that work would be lost. Push it first (commit, then \"push\"), or write \"repo acme/lib --force\" to move anyway and lose it."},
		{"not allowed", "repo other/x", &moveTurns{err: &agentpool.Error{Code: agentpool.EINVALID, Err: &agentpool.WorkspaceError{Text: "github.com/other/x is not on this bot's list of allowed repositories (repos.allow); ask an operator to add it.", Err: fmt.Errorf("x")}}},
			"The repository was not changed: github.com/other/x is not on this bot's list of allowed repositories"},
		{"not set up", "repo acme/lib", &moveTurns{queueErr: &agentpool.Error{Code: agentpool.EINVALID, Err: agentpool.ErrNoChooser}}, "Repositories are not set up on this bot"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHandler(HandlerConfig{}, tc.turns, noSessions{}, nil, nil)
			r := newChatReplier()
			thread := SlackThread("T", "C", "1.1")
			require.NoError(t, h.Handle(t.Context(), Message{Thread: thread, ChannelID: "C", Text: tc.text, EventID: "e"}, r))
			got := r.waitPost(t, tc.want)
			require.Contains(t, got, tc.want)
			require.NoError(t, h.Wait(t.Context()))
			if tc.name != "not set up" {
				require.Len(t, tc.turns.reqs, 1, "queued before Handle returned")
				require.Equal(t, thread.String(), tc.turns.reqs[0].Thread.ThreadKey)
				require.Equal(t, tc.name == "forced", tc.turns.reqs[0].Force)
			}
		})
	}
}

func TestRepoAloneShowsTheRepository(t *testing.T) {
	h := NewHandler(HandlerConfig{}, &moveTurns{}, noSessions{}, nil, nil)
	r := newChatReplier()
	require.NoError(t, h.Handle(t.Context(), Message{Thread: SlackThread("T", "C9", "1.1"), ChannelID: "C9", Text: "repo", EventID: "e"}, r))
	got := r.waitPost(t, "Repository: github.com/acme/app")
	require.Contains(t, got, "Write \"repo owner/name\"")
	require.NoError(t, h.Wait(t.Context()))
}

var _ Mover = (*moveTurns)(nil)

// ownedSession is a Store whose every thread was started by U9.
type ownedSession struct{ Store }

func (ownedSession) SessionGet(_ context.Context, key string) (db.Session, error) {
	return db.Session{ThreadKey: key, OwnerUserID: "U9"}, nil
}

// TestRepoMoveIsTheOwnersCall: with access.owner_only_controls, only the thread's starter moves it;
// nothing is queued for anyone else.
func TestRepoMoveIsTheOwnersCall(t *testing.T) {
	turns := &moveTurns{res: agentpool.MoveResult{Choice: agentpool.Choice{Name: "github.com/acme/lib"}}}
	h := NewHandler(HandlerConfig{Access: AccessPolicy{OwnerOnlyControls: true}}, turns, ownedSession{}, nil, nil)
	r := newChatReplier()
	thread := SlackThread("T", "C", "1.1")
	require.NoError(t, h.Handle(t.Context(), Message{Thread: thread, User: User{ID: "U1"}, Text: "repo acme/lib", EventID: "e1"}, r))
	r.waitPost(t, "Only the person who started this thread, or an admin, can move it.")
	require.Empty(t, turns.reqs)
	require.NoError(t, h.Handle(t.Context(), Message{Thread: thread, User: User{ID: "U9"}, Text: "repo acme/lib", EventID: "e2"}, r))
	r.waitPost(t, "This thread will work on github.com/acme/lib")
	require.Len(t, turns.reqs, 1)
	require.NoError(t, h.Wait(t.Context()))
}
