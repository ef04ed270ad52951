package shell

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
	"github.com/threadbox/threadbox/sandbox/local"
)

func TestFormatAnswer(t *testing.T) {
	tests := []struct {
		name, stdout, stderr string
		res                  sandbox.ExecResult
		want                 string
	}{
		{"plain", "hi\n", "", sandbox.ExecResult{}, "hi"},
		{"stderr kept apart", "out\n", "warn\n", sandbox.ExecResult{}, "out\nstderr:\nwarn"},
		{"exit code shown", "", "boom\n", sandbox.ExecResult{ExitCode: 3}, "stderr:\nboom\n[exit 3]"},
		{"timeout", "partial", "", sandbox.ExecResult{ExitCode: 124, TimedOut: true}, "partial\n[timed out: exit 124]"},
		{"truncated", "x", "", sandbox.ExecResult{Truncated: true}, "x\n[output truncated]"},
		{"nothing", "", "", sandbox.ExecResult{}, "(no output)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, FormatAnswer(tt.stdout, tt.stderr, tt.res))
		})
	}
}

func TestShellOnDocker(t *testing.T) {
	p := dockertest.New(t, docker.Options{})
	h, err := p.Create(t.Context(), sandbox.Spec{Image: dockertest.Image(), Labels: sandbox.Labels{Deployment: "shelltest", Thread: "t"}})
	require.NoError(t, err)
	t.Cleanup(func() {
		// Not t.Context(): it is already cancelled when cleanups run, and the sandbox would leak.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, p.Destroy(ctx, h))
	})
	sb := sandbox.Bind(p, h)
	r := New()
	require.NoError(t, r.Ensure(t.Context(), sb))
	id, replaced, err := r.Session(t.Context(), sb, "", "web:x")
	require.NoError(t, err)
	require.False(t, replaced)
	same, _, err := r.Session(t.Context(), sb, id, "web:x")
	require.NoError(t, err)
	require.Equal(t, id, same)

	var mu sync.Mutex
	var events []string
	res, err := r.Prompt(t.Context(), sb, id, runtime.Prompt{Text: "echo out; echo err >&2; ls -d output/display input; exit 2", History: "earlier turns"},
		func(ev runtime.Event) { mu.Lock(); events = append(events, ev.Text); mu.Unlock() })
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Equal(t, 2, res.ExitCode)
	require.Contains(t, res.Answer, "out\ninput\noutput/display", "Ensure made the directories")
	require.Contains(t, res.Answer, "stderr:\nerr")
	require.Contains(t, res.Answer, "[exit 2]")
	mu.Lock()
	require.Contains(t, strings.Join(events, ""), "out")
	mu.Unlock()
	hist, err := sb.ReadFile(t.Context(), HistoryPath, 1<<20)
	require.NoError(t, err)
	require.Equal(t, "earlier turns", string(hist), "replayed history is left for the user")

	require.NoError(t, p.Stop(t.Context(), h))
	_, err = r.Prompt(t.Context(), sb, id, runtime.Prompt{Text: "true"}, nil)
	require.Equal(t, runtime.ClassSandboxDown, runtime.Classify(err), "a stopped sandbox is sandbox-down: %v", err)
}

// TestPromptIsNeverAnOption: a message is the command, whatever it starts with; one starting with
// '-' must not be read as an option of the shell.
func TestPromptIsNeverAnOption(t *testing.T) {
	p, err := local.New(local.Options{Dir: t.TempDir(), IUnderstandNoIsolation: true})
	require.NoError(t, err)
	h, err := p.Create(t.Context(), sandbox.Spec{Image: "host", Labels: sandbox.Labels{Deployment: "d", Thread: "t"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), h) })
	sb := sandbox.Bind(p, h)
	r := New()
	require.NoError(t, r.Ensure(t.Context(), sb))
	tests := []struct {
		text, want string
		exit       int
	}{
		{"echo plain", "plain", 0},
		{"--version", "--version: ", 127},
		{"-x", "-x: ", 127},
		{"-- echo hi", "--: ", 127},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			res, err := r.Prompt(t.Context(), sb, "shell-1", runtime.Prompt{Text: tt.text}, nil)
			require.NoError(t, err)
			require.Equal(t, tt.exit, res.ExitCode, res.Answer)
			require.Contains(t, res.Answer, tt.want)
		})
	}
}
