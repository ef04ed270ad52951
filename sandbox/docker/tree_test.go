package docker_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// archiveGets counts the archive downloads among calls (a HEAD on the same path is a stat).
func archiveGets(calls []string) int {
	n := 0
	for _, c := range calls {
		if strings.HasPrefix(c, "GET ") && strings.HasSuffix(c, "/archive") {
			n++
		}
	}
	return n
}

// Listing and reading 200 files took a listing, then a download and two stats per file: about 600
// daemon calls, some 20 s. ReadTree downloads the directory once.
func TestReadTreeOneArchive(t *testing.T) {
	p, count := dockertest.NewCounted(t, docker.Options{})
	h := create(t, p, testSpec(t))
	sh(t, p, h, `mkdir -p output/display/sub && cd output/display && for i in $(seq 1 199); do echo "file $i" > f$i.txt; done && echo deep > sub/d.txt`)

	count.Reset()
	tree, err := p.ReadTree(t.Context(), h, "output/display", sandbox.TreeLimits{MaxFileBytes: 1 << 20})
	require.NoError(t, err)
	calls := count.Calls()
	require.Len(t, tree.Files, 201)
	for _, f := range tree.Files {
		if f.IsRegular() {
			require.True(t, f.Read, f.Path)
		}
	}
	require.Equal(t, "file 7\n", string(tree.Files[slicesIndex(tree, "f7.txt")].Data))
	require.Equal(t, 1, archiveGets(calls), "one archive: %v", calls)
	require.LessOrEqual(t, len(calls), 2, "the archive and a stat of output: %v", calls)
}

// A file of gigabytes in the directory is not downloaded to be read past: the tree stops there,
// listing it, and what came through the daemon stays near the caps. (Listing the same directory
// downloads all of it.)
func TestReadTreeHugeFileNotTransferred(t *testing.T) {
	p, count := dockertest.NewCounted(t, docker.Options{})
	h := create(t, p, testSpec(t))
	const huge = 1 << 30
	// Sparse: nothing to write, but the daemon sends its holes as zeros.
	sh(t, p, h, fmt.Sprintf(`mkdir -p out && cd out && echo a > a && echo z > z && dd if=/dev/zero of=m-huge bs=1 count=0 seek=%d 2>/dev/null`, huge))

	count.Reset()
	tree, err := p.ReadTree(t.Context(), h, "out", sandbox.TreeLimits{MaxFileBytes: 1 << 20, MaxSkipBytes: 4 << 20})
	require.NoError(t, err)
	require.True(t, tree.Partial, "stopped at the huge file")
	require.Equal(t, []string{"a", "m-huge"}, treePaths(tree), "the archive is in name order: a, then m-huge, where it stopped")
	require.Equal(t, int64(huge), tree.Files[1].Size)
	require.False(t, tree.Files[1].Read)
	require.Equal(t, "a\n", string(tree.Files[0].Data))
	require.Less(t, count.Bytes(), int64(16<<20), "the huge file was not downloaded")

	// Within MaxSkipBytes a file over the per-file cap is read past, and the tree is whole.
	sh(t, p, h, `cd out && rm m-huge && head -c 3000000 /dev/zero > m-big`)
	tree, err = p.ReadTree(t.Context(), h, "out", sandbox.TreeLimits{MaxFileBytes: 1 << 20, MaxSkipBytes: 4 << 20})
	require.NoError(t, err)
	require.False(t, tree.Partial)
	require.Equal(t, []string{"a", "m-big", "z"}, treePaths(tree))
	require.Equal(t, "z\n", string(tree.Files[2].Data))
	require.False(t, tree.Files[1].Read)
}

func slicesIndex(tree sandbox.Tree, p string) int {
	for i, f := range tree.Files {
		if f.Path == p {
			return i
		}
	}
	return -1
}

func treePaths(tree sandbox.Tree) []string {
	out := []string{}
	for _, f := range tree.Files {
		out = append(out, f.Path)
	}
	return out
}
