package runtime

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSandboxDown(t *testing.T) {
	refused := errors.New("connection refused")
	marked := fmt.Errorf("%w: %w", ErrSandboxDown, refused)
	tests := []struct {
		name     string
		err      error
		want     error // errors.Is must hold
		wantDown bool
		same     bool // returned unchanged
	}{
		{name: "a failure to reach it is marked", err: refused, want: refused, wantDown: true},
		{name: "marked already: unchanged", err: marked, want: refused, wantDown: true, same: true},
		{name: "canceled: the caller gave up", err: fmt.Errorf("exec: %w", context.Canceled), want: context.Canceled, same: true},
		{name: "deadline: the caller gave up", err: context.DeadlineExceeded, want: context.DeadlineExceeded, same: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SandboxDown(tt.err)
			require.ErrorIs(t, got, tt.want)
			require.Equal(t, tt.wantDown, errors.Is(got, ErrSandboxDown))
			if tt.same {
				require.True(t, got == tt.err, "returned unchanged")
			}
			if tt.wantDown {
				require.Equal(t, ClassSandboxDown, Classify(got))
			}
		})
	}
}

// TestClassifyPromptCut: a run cut after the agent got the prompt is never a retryable class, even
// when its cause is the sandbox going down or the session vanishing.
func TestClassifyPromptCut(t *testing.T) {
	down := fmt.Errorf("the event stream ended: %w", ErrSandboxDown)
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"sandbox down before the prompt", down, ClassSandboxDown},
		{"session missing before the prompt", ErrSessionMissing, ClassSessionMissing},
		{"cut: the sandbox went down after", PromptCut(down), ClassInterrupted},
		{"cut: the session vanished after", PromptCut(ErrSessionMissing), ClassInterrupted},
		{"cut, wrapped again", fmt.Errorf("opencode: %w", PromptCut(errors.New("gone"))), ClassInterrupted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, Classify(tt.err))
		})
	}
	cut := PromptCut(down)
	require.True(t, PromptCut(cut) == cut, "marked already: unchanged")
	require.ErrorIs(t, cut, ErrSandboxDown, "the cause stays matchable")
}
