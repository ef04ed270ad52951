package claudecode

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/sandbox"
)

// printingSandbox runs every exec as a process that prints stdout and stderr and exits.
type printingSandbox struct {
	sandbox.Sandbox
	stdout, stderr string
	exit           int
}

func (s printingSandbox) Handle() sandbox.Handle { return sandbox.Handle{Provider: "test", ID: "sb1"} }

func (s printingSandbox) Exec(_ context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if req.Stdout != nil {
		_, _ = req.Stdout.Write([]byte(s.stdout))
	}
	if req.Stderr != nil {
		_, _ = req.Stderr.Write([]byte(s.stderr))
	}
	return sandbox.ExecResult{ExitCode: s.exit}, nil
}

// TestErrorTextIsCleanText: what claude prints when it fails is outside input, and it becomes the
// turn's error, stored (PostgreSQL text refuses NUL and invalid UTF-8) and shown in the chat.
func TestErrorTextIsCleanText(t *testing.T) {
	tests := []struct {
		name           string
		stdout, stderr string
	}{
		{"invalid UTF-8 on stderr", "", "fatal: \xff\xfe bad"},
		{"NUL on stderr", "", "fatal:\x00 bad"},
		{"non-JSON stdout line cut mid-rune", "a" + strings.Repeat("é", 300) + "\n", ""},
		{"NUL on stdout", "oops\x00\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(Config{})
			_, err := r.Prompt(t.Context(), printingSandbox{stdout: tt.stdout, stderr: tt.stderr, exit: 1},
				"123e4567-e89b-42d3-a456-426614174000", runtime.Prompt{Text: "hi"}, nil)
			require.Error(t, err)
			msg := err.Error()
			require.True(t, utf8.ValidString(msg), "%q", msg)
			require.NotContains(t, msg, "\x00")
		})
	}
}
