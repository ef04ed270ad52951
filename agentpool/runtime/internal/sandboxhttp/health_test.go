package sandboxhttp

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWaitHealthy walks the poll on a fake clock: the attempts' bounds, what ends it, and the grace a
// server found running gets.
func TestWaitHealthy(t *testing.T) {
	errRefused := errors.New("refused the token")
	tests := []struct {
		name    string
		started bool
		// answers are the checks' results in order; past the end, the last repeats.
		answers      []error
		wantErr      error
		wantAttempts []time.Duration
		wantElapsed  time.Duration // at least
	}{
		{name: "healthy at once", started: true, answers: []error{nil}, wantAttempts: []time.Duration{500 * time.Millisecond}},
		{name: "no answer doubles the bound up to 5 s", started: true,
			answers:      []error{ErrNoAnswer, ErrNoAnswer, ErrNoAnswer, ErrNoAnswer, ErrNoAnswer, nil},
			wantAttempts: []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}},
		{name: "a refusal keeps the bound", started: true, answers: []error{errors.New("503"), nil},
			wantAttempts: []time.Duration{500 * time.Millisecond, 500 * time.Millisecond}},
		{name: "refused credentials end it at once", started: true, answers: []error{fmt.Errorf("health: %w", errRefused)},
			wantErr: errRefused, wantAttempts: []time.Duration{500 * time.Millisecond}},
		{name: "a server found running gets the grace", started: false, answers: []error{errors.New("503")},
			wantErr: errors.New("503"), wantElapsed: StartupGrace},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var attempts []time.Duration
				start := time.Now()
				err := WaitHealthy(context.Background(), tc.started, errRefused, func(ctx context.Context, attempt time.Duration) error {
					attempts = append(attempts, attempt)
					return tc.answers[min(len(attempts), len(tc.answers))-1]
				})
				if tc.wantErr == nil {
					require.NoError(t, err)
				} else {
					require.Error(t, err)
					require.Contains(t, err.Error(), tc.wantErr.Error())
				}
				if tc.wantAttempts != nil {
					require.Equal(t, tc.wantAttempts, attempts)
				}
				require.GreaterOrEqual(t, time.Since(start), tc.wantElapsed)
				if tc.wantElapsed > 0 {
					require.Less(t, time.Since(start), tc.wantElapsed+time.Second, "ends with the grace")
				}
			})
		})
	}
}
