package sandboxtest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
)

// testReadTree: the TreeReader capability keeps ListFiles' contract (same entries, symlinks listed
// and never followed, the same refusals) and reads the regular files within its caps, and only those.
func (s *suite) testReadTree(t *testing.T) {
	tr, ok := sandbox.As[sandbox.TreeReader](s.p)
	if !ok {
		t.Skip("provider has no TreeReader")
	}
	ctx := t.Context()
	h := s.create(t, s.spec(t))
	s.ok(t, h, `set -e
mkdir -p t/sub/deep t/empty-dir
printf hello > t/a.txt
ln t/a.txt t/hard
printf nested > t/sub/deep/n.txt
: > t/empty
printf 'sp ace' > "t/sp ace.txt"
head -c 3000 /dev/zero > t/big
ln -s /etc/passwd t/passwd
ln -s /etc t/etclink
ln -s sub t/sublink
ln -s t tlink
ln -s /etc elink
mkdir total && for f in 1 2 3 4 5; do printf %0100d 0 | tr 0 "$f" > total/f$f; done`)
	lim := sandbox.TreeLimits{MaxFileBytes: 1024, MaxTotalBytes: 1 << 20, MaxSkipBytes: 1 << 20}

	t.Run("ContentsAndKinds", func(t *testing.T) {
		tree, err := tr.ReadTree(ctx, h, "t", lim)
		require.NoError(t, err)
		require.False(t, tree.Partial)
		requireTree(t, tree, lim)

		list, err := s.p.ListFiles(ctx, h, "t")
		require.NoError(t, err)
		byPath := map[string]sandbox.TreeFile{}
		for _, f := range tree.Files {
			byPath[f.Path] = f
		}
		require.Equal(t, paths(list), treePaths(tree), "the same entries as ListFiles")
		for _, fi := range list {
			f := byPath[fi.Path]
			require.Equal(t, fi.Mode, f.Mode, fi.Path)
			require.Equal(t, fi.Size, f.Size, fi.Path)
		}
		for name, want := range map[string]string{"a.txt": "hello", "hard": "hello", "sub/deep/n.txt": "nested", "empty": "", "sp ace.txt": "sp ace"} {
			require.True(t, byPath[name].Read, "%s is read", name)
			require.Equal(t, want, string(byPath[name].Data), name)
		}
		require.True(t, byPath["sub/deep"].Mode.IsDir())
		require.True(t, byPath["empty-dir"].Mode.IsDir())
		require.Equal(t, int64(3000), byPath["big"].Size, "a file over the cap is listed with its size")
		require.False(t, byPath["big"].Read, "and not read")
		for _, l := range []string{"passwd", "etclink", "sublink"} {
			require.NotZero(t, byPath[l].Mode&fs.ModeSymlink, "%s is listed as a symlink", l)
			require.False(t, byPath[l].Read, "%s is not followed", l)
		}

		sub, err := sandbox.Bind(s.p, h).ReadTree(ctx, "t/sub", lim)
		require.NoError(t, err)
		require.Equal(t, []string{"deep", "deep/n.txt"}, treePaths(sub), "paths are relative to the dir read")
	})
	t.Run("TotalCap", func(t *testing.T) {
		// Files within the per-file cap passed over count against MaxPassBytes, never against
		// MaxSkipBytes, which is for files that can never be kept.
		lim := sandbox.TreeLimits{MaxFileBytes: 1024, MaxTotalBytes: 250, MaxSkipBytes: 1, MaxPassBytes: 1 << 20}
		tree, err := tr.ReadTree(ctx, h, "total", lim)
		require.NoError(t, err)
		require.False(t, tree.Partial)
		require.Equal(t, []string{"f1", "f2", "f3", "f4", "f5"}, treePaths(tree))
		requireTree(t, tree, lim)
		read := 0
		for _, f := range tree.Files {
			want := strings.Repeat(f.Path[1:], 100)
			if f.Read {
				read++
				require.Equal(t, want, string(f.Data), "%s's own content", f.Path)
			}
			if f.SHA256 != "" {
				// A provider that passed over a file may say its digest; it must be that file's.
				sum := sha256.Sum256([]byte(want))
				require.False(t, f.Read, "%s: a digest only for a file not kept", f.Path)
				require.Equal(t, hex.EncodeToString(sum[:]), f.SHA256, "%s's digest", f.Path)
			}
		}
		require.Equal(t, 2, read, "files are read while they fit the total")
	})
	t.Run("SkipBound", func(t *testing.T) {
		// 3000 bytes over the per-file cap, more than the provider may throw away: it either lists
		// everything (its listing costs no contents) or stops at big, having listed it.
		lim := sandbox.TreeLimits{MaxFileBytes: 1024, MaxTotalBytes: 1 << 20, MaxSkipBytes: 100}
		tree, err := tr.ReadTree(ctx, h, "t", lim)
		require.NoError(t, err)
		requireTree(t, tree, lim)
		full, err := tr.ReadTree(ctx, h, "t", sandbox.TreeLimits{MaxFileBytes: 1024, MaxTotalBytes: 1 << 20})
		require.NoError(t, err)
		if !tree.Partial {
			require.Equal(t, full, tree)
			return
		}
		i := slices.IndexFunc(tree.Files, func(f sandbox.TreeFile) bool { return f.Path == "big" })
		require.GreaterOrEqual(t, i, 0, "the file it stopped at is listed: %v", treePaths(tree))
		require.Equal(t, int64(3000), tree.Files[i].Size)
		require.False(t, tree.Files[i].Read)
		for _, f := range tree.Files {
			require.Contains(t, full.Files, f, "what a partial tree holds is right")
		}
	})
	t.Run("PassBound", func(t *testing.T) {
		// Two of five 100-byte files kept, room to pass over one more: the provider either lists
		// everything (its listing costs no contents) or stops at a file it could not pass over.
		lim := sandbox.TreeLimits{MaxFileBytes: 1024, MaxTotalBytes: 250, MaxSkipBytes: 1 << 20, MaxPassBytes: 150}
		tree, err := tr.ReadTree(ctx, h, "total", lim)
		require.NoError(t, err)
		requireTree(t, tree, lim)
		if !tree.Partial {
			require.Equal(t, []string{"f1", "f2", "f3", "f4", "f5"}, treePaths(tree))
			return
		}
		passed := 0
		for _, f := range tree.Files {
			if !f.Read && f.SHA256 != "" {
				passed++
			}
		}
		require.LessOrEqual(t, passed, 1, "no more passed over than MaxPassBytes allows")
		require.Less(t, len(tree.Files), 5)
	})
	t.Run("Refusals", func(t *testing.T) {
		_, err := tr.ReadTree(ctx, h, "no-such-dir", lim)
		requireIs(t, err, fs.ErrNotExist)
		require.False(t, errors.Is(err, sandbox.ErrNotFound), "a missing dir is not a missing sandbox: %v", err)
		_, err = tr.ReadTree(ctx, h, "tlink", lim)
		requireIs(t, err, sandbox.ErrNotRegular, "a dir that is a symlink is not followed")
		_, err = tr.ReadTree(ctx, h, "elink/ssl", lim)
		requireIs(t, err, sandbox.ErrNotRegular, "nor a dir below a symlink")
		_, err = tr.ReadTree(ctx, h, "t/a.txt", lim)
		requireIs(t, err, sandbox.ErrNotRegular, "a file is not a dir")
	})
	t.Run("TooManyEntries", func(t *testing.T) {
		s.ok(t, h, fmt.Sprintf("mkdir many && cd many && seq 1 %d | xargs touch", sandbox.MaxListEntries))
		tree, err := tr.ReadTree(ctx, h, "many", lim)
		require.NoError(t, err)
		require.Len(t, tree.Files, sandbox.MaxListEntries, "exactly MaxListEntries")
		s.ok(t, h, "touch many/one-more")
		_, err = tr.ReadTree(ctx, h, "many", lim)
		requireIs(t, err, sandbox.ErrTooLarge)
		s.ok(t, h, "rm -rf many")
	})
}

// requireTree checks what holds for every tree: sorted paths; only regular files read, none over
// the per-file cap, with their listed size; contents within the total, and a file within the
// per-file cap left unread only when it did not fit the total.
func requireTree(t *testing.T, tree sandbox.Tree, lim sandbox.TreeLimits) {
	t.Helper()
	require.True(t, slices.IsSorted(treePaths(tree)), "sorted by path: %v", treePaths(tree))
	var total int64
	for _, f := range tree.Files {
		if !f.Read {
			require.Nil(t, f.Data, "%s: data without Read", f.Path)
			continue
		}
		require.True(t, f.IsRegular(), "%s: only regular files are read (mode %s)", f.Path, f.Mode)
		require.LessOrEqual(t, f.Size, lim.MaxFileBytes, f.Path)
		require.Len(t, f.Data, int(f.Size), f.Path)
		total += f.Size
	}
	require.LessOrEqual(t, total, lim.MaxTotalBytes, "contents within the total")
	for _, f := range tree.Files {
		if f.IsRegular() && !f.Read && f.Size <= lim.MaxFileBytes && !tree.Partial {
			require.Greater(t, total+f.Size, lim.MaxTotalBytes, "%s (%d bytes) fit the total but was not read", f.Path, f.Size)
		}
	}
}

func treePaths(tree sandbox.Tree) []string {
	out := make([]string, 0, len(tree.Files))
	for _, f := range tree.Files {
		out = append(out, f.Path)
	}
	return out
}
