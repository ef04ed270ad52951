package bot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
)

// submitErrTurns is a pool whose Submit fails with err (nil: takes the turn) and whose Do queues
// nothing (what a command does is not the point here: its message's files are).
type submitErrTurns struct {
	fakeTurns
	err error
}

func (f *submitErrTurns) Submit(ctx context.Context, req agentpool.Request) (agentpool.Ticket, error) {
	if f.err != nil {
		return agentpool.Ticket{}, f.err
	}
	return f.fakeTurns.Submit(ctx, req)
}

func (f *submitErrTurns) Do(string, func(context.Context), func(error)) error { return nil }

// noInterruptedStore has sessions by owner and no interrupted turn to retry.
type noInterruptedStore struct{ ownerStore }

func (noInterruptedStore) TurnLastFailedWith(context.Context, string, string) (db.Turn, error) {
	return db.Turn{}, db.ErrNotFound
}

// TurnGetByEvent finds no recorded turn: a duplicate is then taken as the same message.
func (noInterruptedStore) TurnGetByEvent(context.Context, string) (db.Turn, error) {
	return db.Turn{}, db.ErrNotFound
}

// TestMessageNotTurnedLeavesNoSpoolFile: Handle owns a message's files. One that does not become a
// submitted turn (a command, a refusal, a duplicate, a failure to record it) has them discarded, or
// they would stay on disk for good: nothing else reads, and so removes, them. A submitted turn's
// files are left for the pool, which reads them.
func TestMessageNotTurnedLeavesNoSpoolFile(t *testing.T) {
	tests := []struct {
		name      string
		text      string
		user      string
		submitErr error
		wantLeft  int
	}{
		{"help", "help", "U1", nil, 0},
		{"status", "status", "U1", nil, 0},
		{"stop", "stop", "U1", nil, 0},
		{"reset", "reset", "U1", nil, 0},
		{"retry", "retry", "U1", nil, 0},
		{"admin command", "admin stats", "U1", nil, 0},
		{"repo command", "repo owner/name", "U1", nil, 0},
		{"runtime command", "runtime opencode", "U1", nil, 0},
		{"use command", "use daytona", "U1", nil, 0},
		{"access denied", "do it", "U2", nil, 0},
		{"NUL in the text", "do\x00it", "U1", nil, 0},
		{"queue full", "do it", "U1", fmt.Errorf("agentpool: submit: %w", agentpool.ErrQueueFull), 0},
		{"duplicate event", "do it", "U1", fmt.Errorf("agentpool: submit: %w", db.ErrDuplicate), 0},
		{"not recorded", "do it", "U1", fmt.Errorf("agentpool: submit: %w", agentpool.ErrClosed), 0},
		{"submitted: the pool's now", "do it", "U1", nil, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var files []File
			for i := range 2 {
				name := filepath.Join(dir, fmt.Sprintf("spool-%d", i))
				require.NoError(t, os.WriteFile(name, []byte("content"), 0o600))
				files = append(files, File{Name: filepath.Base(name), Size: 7, Discard: func() { _ = os.Remove(name) }})
			}
			admin := NewAdmin(nil, nil, []string{"slack:U1"}, nil)
			h := NewHandler(HandlerConfig{Access: AccessPolicy{Users: []string{"slack:U1"}}},
				&submitErrTurns{err: tt.submitErr}, noInterruptedStore{}, admin, nil)
			msg := slackMsg("T1", "C1", tt.user, tt.text)
			msg.Files = files
			_ = h.Handle(context.Background(), msg, &posts{})
			require.NoError(t, h.Wait(context.Background()))
			ents, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Len(t, ents, tt.wantLeft)
		})
	}
}
