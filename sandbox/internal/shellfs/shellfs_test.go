package shellfs_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/internal/shellfs"
)

func TestParseList(t *testing.T) {
	out := "41ed 4096 1700000000 ./dir\n" +
		"81a4 12 1700000001 ./dir/a b.txt\n" +
		"a1ff 7 1700000002 ./link\n" +
		"garbage line\n" +
		"81a4 x 1 ./bad-size\n"
	list, err := shellfs.ParseList("p", "/w", out)
	require.NoError(t, err)
	require.Len(t, list, 3, "lines that are not stat lines are skipped")
	require.Equal(t, "dir", list[0].Path)
	require.True(t, list[0].Mode.IsDir())
	require.Zero(t, list[0].Size, "sizes only for regular files")
	require.Equal(t, "dir/a b.txt", list[1].Path, "spaces in names are kept")
	require.EqualValues(t, 12, list[1].Size)
	require.Equal(t, fs.FileMode(0o644), list[1].Mode)
	require.Equal(t, fs.ModeSymlink, list[2].Mode.Type())

	var b strings.Builder
	for i := range sandbox.MaxListEntries + 1 {
		fmt.Fprintf(&b, "81a4 1 1 ./f%d\n", i)
	}
	_, err = shellfs.ParseList("p", "/w", b.String())
	require.ErrorIs(t, err, sandbox.ErrTooLarge, "past the cap the listing is refused, not cut")
}

func TestScriptErr(t *testing.T) {
	for _, tc := range []struct {
		code int
		err  error
		want error
	}{
		{0, nil, nil},
		{2, nil, fs.ErrNotExist},
		{3, nil, sandbox.ErrNotRegular},
		{4, nil, sandbox.ErrFileTooLarge},
		{1, errors.New("boom"), nil},
	} {
		got := shellfs.ScriptErr("p", "read", "/w/f", " out ", tc.code, tc.err)
		if tc.code == 0 {
			require.NoError(t, got)
			continue
		}
		require.Error(t, got)
		require.True(t, strings.HasPrefix(got.Error(), "p: read /w/f"), got.Error())
		if tc.want != nil {
			require.ErrorIs(t, got, tc.want)
		}
	}
}

func TestResolveAndTop(t *testing.T) {
	abs, err := shellfs.Resolve("/workspace", "a/../b")
	require.NoError(t, err)
	require.Equal(t, "/workspace/b", abs)
	_, err = shellfs.Resolve("/workspace", "../..")
	require.ErrorIs(t, err, sandbox.ErrInvalidSpec, "the root directory is refused")
	require.Equal(t, "/workspace", shellfs.Top("/workspace/", "/workspace/b"))
	require.Equal(t, "", shellfs.Top("/workspace", "/etc/passwd"), "outside the work directory the walk starts at the root")
}

// A name is the last field of a stat line, so a name holding a newline could forge whole lines of
// the listing (an entry that does not exist, a symlink claimed regular, padding toward the cap).
// Paths with a newline are left out of the listing instead.
func TestListScriptNewlineNames(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ok.txt"), []byte("x"), 0o644))
	// A name cannot hold a slash, but a directory's name can end a line and start the next one.
	for _, d := range []string{"x\n81a4 1 1 .", "y\na1ff 1 1 ."} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, d), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, d, "forged"), []byte("x"), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "plain\nname"), []byte("x"), 0o644))
	out, err := exec.Command("/bin/sh", "-c", shellfs.ListScript, "sh", dir, "").Output()
	require.NoError(t, err)
	list, err := shellfs.ParseList("p", dir, string(out))
	require.NoError(t, err)
	var got []string
	for _, fi := range list {
		got = append(got, fi.Path)
	}
	require.Equal(t, []string{"ok.txt"}, got)
}
