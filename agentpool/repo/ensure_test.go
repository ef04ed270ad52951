package repo

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// localForge is a bare repository acme/app under a directory that stands for the forge's base URL.
func localForge(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	work := filepath.Join(t.TempDir(), "w")
	g := git{}
	for _, args := range [][]string{
		{"init", "--quiet", "--initial-branch=main", work},
		{"-C", work, "commit", "--quiet", "--allow-empty", "-m", "first"},
		{"clone", "--quiet", "--bare", work, filepath.Join(base, "acme", "app.git")},
	} {
		_, err := g.run(t.Context(), "", args...)
		require.NoError(t, err)
	}
	return base
}

// A copy into the sandbox that fails halfway (a full disk, a cancelled context) must not leave a
// repository the next Ensure takes for a finished checkout: it checks out again, and the sandbox
// ends up with the marker and the thread's branch.
func TestEnsureAfterAHalfCopyChecksOutAgain(t *testing.T) {
	r, err := New(Config{CacheDir: t.TempDir(), Hosts: map[string]string{"github.com": localForge(t)}, Allow: Allowlist{"github.com/acme"}})
	require.NoError(t, err)
	prov := sandboxfake.New()
	failAfter := -1 // entries tar extracts before failing; -1 never fails
	prov.Exec_ = func(ctx context.Context, b *sandboxfake.Box, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
		if strings.Join(req.Cmd, " ") != "tar -x -f -" {
			return sandbox.ExecResult{}, nil
		}
		tr := tar.NewReader(req.Stdin)
		for n := 0; ; n++ {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				return sandbox.ExecResult{}, nil
			}
			require.NoError(t, err)
			if n == failAfter {
				_, _ = io.WriteString(req.Stderr, "tar: write error: No space left on device")
				return sandbox.ExecResult{ExitCode: 2}, nil
			}
			if hdr.Typeflag == tar.TypeReg {
				data, err := io.ReadAll(tr)
				require.NoError(t, err)
				b.Files[path.Join(b.Spec.WorkDir, hdr.Name)] = data
			}
		}
	}
	h, err := prov.Create(t.Context(), sandbox.Spec{Image: "x", WorkDir: "/work", Labels: sandbox.Labels{Deployment: "d", Thread: "t", Generation: 1}})
	require.NoError(t, err)
	sb := sandbox.Bind(prov, h)
	spec := Spec{Host: "github.com", Owner: "acme", Name: "app"}

	// Fail at points of the copy (the first entries are .git/ and what it starts with): each
	// failed Ensure is an error, and the next one starts over.
	for _, failAfter = range []int{0, 1, 2, 3, 5, 8, 13} {
		for name := range prov.Box(h.ID).Files {
			delete(prov.Box(h.ID).Files, name)
		}
		_, err := r.Ensure(t.Context(), sb, spec, "thread-1", Identity{Name: "u", Email: "u@x"})
		require.Error(t, err, "failing at entry %d", failAfter)
		note, err := func() (string, error) {
			keep := failAfter
			failAfter = -1
			defer func() { failAfter = keep }()
			return r.Ensure(t.Context(), sb, spec, "thread-1", Identity{Name: "u", Email: "u@x"})
		}()
		require.NoError(t, err, "after failing at entry %d", failAfter)
		require.Contains(t, note, "Checked out", "after failing at entry %d, the next Ensure did nothing", failAfter)
		_, err = sb.ReadFile(t.Context(), markerPath, 1<<20)
		require.NoError(t, err)
	}
}
