package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
)

// fakeTreeDaemon answers every stat with a directory and every archive download with serve's bytes,
// and counts what it wrote.
func fakeTreeDaemon(t *testing.T, id string, serve func(w io.Writer)) (*Provider, *atomic.Int64) {
	t.Helper()
	var written atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/containers/"+id+"/archive") {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"Id": id, "State": map[string]any{"Status": "running"}})
			return
		}
		stat, _ := json.Marshal(map[string]any{"name": "out", "mode": uint32(fs.ModeDir | 0o755), "mtime": time.Now()})
		w.Header().Set("X-Docker-Container-Path-Stat", base64.StdEncoding.EncodeToString(stat))
		if r.Method == http.MethodHead {
			return
		}
		w.Header().Set("Content-Type", "application/x-tar")
		serve(countWriter{w, &written})
	}))
	t.Cleanup(srv.Close)
	cli, err := client.NewClientWithOpts(client.WithHost("tcp://"+srv.Listener.Addr().String()), client.WithVersion("1.45"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return &Provider{cli: cli, log: zap.NewNop(), stopTimeout: time.Second, cpu: cpuSamples{last: map[string]cpuSample{}}}, &written
}

type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func tarOf(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, hdr := range hdrs {
		if hdr.Typeflag == 0 {
			hdr.Typeflag, hdr.Mode = tar.TypeReg, 0o644
		}
		require.NoError(t, tw.WriteHeader(hdr))
		if hdr.Typeflag == tar.TypeReg {
			_, err := tw.Write(bytes.Repeat([]byte("x"), int(hdr.Size)))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

// The archive's names are the agent's file names, sent by a daemon that may be remote: a name that
// no archive of the directory holds (absolute, climbing out, outside the directory, far too long)
// refuses the whole tree rather than be taken as a path.
func TestReadTreeRefusesBadNames(t *testing.T) {
	const id = "c0ffee"
	h := newHandle(id, handleState{Volume: "v", User: "1000:1000", UID: 1000, GID: 1000, WorkDir: "/workspace"})
	root := &tar.Header{Name: "out/", Typeflag: tar.TypeDir, Mode: 0o755}
	for _, tc := range []struct {
		name string
		hdr  *tar.Header
		want string // "" : accepted
	}{
		{"plain", &tar.Header{Name: "out/a.txt", Size: 3}, ""},
		{"dots inside a name", &tar.Header{Name: "out/..a..", Size: 3}, ""},
		{"absolute", &tar.Header{Name: "/etc/passwd", Size: 3}, "not below out"},
		{"climbing out", &tar.Header{Name: "out/../../etc/passwd", Size: 3}, "not below out"},
		{"dot element", &tar.Header{Name: "out/./a", Size: 3}, "not below out"},
		{"empty element", &tar.Header{Name: "out//a", Size: 3}, "not below out"},
		{"another directory", &tar.Header{Name: "elsewhere/a", Size: 3}, "not below out"},
		{"too long", &tar.Header{Name: "out/" + strings.Repeat("n", maxTreeName), Size: 3}, "more than 4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			archive := tarOf(t, root, tc.hdr)
			p, _ := fakeTreeDaemon(t, id, func(w io.Writer) { _, _ = w.Write(archive) })
			tree, err := p.ReadTree(t.Context(), h, "out", sandbox.TreeLimits{})
			if tc.want != "" {
				require.ErrorContains(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			require.Len(t, tree.Files, 1)
			require.Equal(t, strings.TrimPrefix(tc.hdr.Name, "out/"), tree.Files[0].Path)
			require.Equal(t, "xxx", string(tree.Files[0].Data))
		})
	}
}

// A hard link is sent as a link to the entry that carried the contents: it is read as that file
// (within the caps: it counts towards the total), and a link to nothing earlier is listed unread.
func TestReadTreeHardLinks(t *testing.T) {
	const id = "c0ffee"
	h := newHandle(id, handleState{Volume: "v", User: "1000:1000", UID: 1000, GID: 1000, WorkDir: "/workspace"})
	archive := tarOf(t, &tar.Header{Name: "out/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "out/a", Size: 6},
		&tar.Header{Name: "out/b", Typeflag: tar.TypeLink, Linkname: "out/a", Mode: 0o644},
		&tar.Header{Name: "out/c", Typeflag: tar.TypeLink, Linkname: "out/a", Mode: 0o644},
		&tar.Header{Name: "out/d", Typeflag: tar.TypeLink, Linkname: "out/nowhere", Mode: 0o644})
	p, _ := fakeTreeDaemon(t, id, func(w io.Writer) { _, _ = w.Write(archive) })
	tree, err := p.ReadTree(t.Context(), h, "out", sandbox.TreeLimits{MaxTotalBytes: 12})
	require.NoError(t, err)
	require.Len(t, tree.Files, 4)
	for i, want := range []struct {
		read bool
		size int64
	}{{true, 6}, {true, 6}, {false, 6}, {false, 0}} {
		f := tree.Files[i]
		require.True(t, f.IsRegular(), f.Path)
		require.Equal(t, want.read, f.Read, f.Path)
		require.Equal(t, want.size, f.Size, f.Path)
		if f.Read {
			require.Equal(t, "xxxxxx", string(f.Data), f.Path)
		}
	}
}

// An archive that never ends (here: extended headers without end, which the tar reader follows
// without returning an entry) is read no further than the caps and the entries' headers allow.
func TestReadTreeEndlessArchive(t *testing.T) {
	const id = "c0ffee"
	h := newHandle(id, handleState{Volume: "v", User: "1000:1000", UID: 1000, GID: 1000, WorkDir: "/workspace"})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "out/" + strings.Repeat("p", 300), Typeflag: tar.TypeDir, Mode: 0o755, Format: tar.FormatPAX}))
	require.NoError(t, tw.Flush())
	pax := buf.Bytes()[:buf.Len()-512] // the PAX header and its records, without the entry they describe
	p, written := fakeTreeDaemon(t, id, func(w io.Writer) {
		for {
			if _, err := w.Write(pax); err != nil {
				return
			}
		}
	})
	lim := sandbox.TreeLimits{MaxFileBytes: 1, MaxTotalBytes: 1, MaxSkipBytes: 1, MaxPassBytes: 1}
	_, err := p.ReadTree(t.Context(), h, "out", lim)
	require.ErrorIs(t, err, sandbox.ErrTooLarge)
	bound := int64(3 + (sandbox.MaxListEntries+2)*maxTreeHeaderBytes)
	require.Less(t, written.Load(), bound+8<<20, "read no further than the bound (and what buffers hold)")
}

// A file's size comes from its header, up to 2^63-1 (a sparse file on XFS, or a lying daemon): added
// to what was read past already it overflowed, the pass went on reading past it, and the collection
// failed at the archive's bound instead of stopping there, Partial, with the files before it.
func TestReadTreeSkipBoundHugeSize(t *testing.T) {
	const id = "c0ffee"
	h := newHandle(id, handleState{Volume: "v", User: "1000:1000", UID: 1000, GID: 1000, WorkDir: "/workspace"})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, hdr := range []*tar.Header{
		{Name: "out/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "out/a", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3}, // kept
		{Name: "out/b", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5}, // over the per-file cap: read past
	} {
		require.NoError(t, tw.WriteHeader(hdr))
		_, err := tw.Write(bytes.Repeat([]byte("x"), int(hdr.Size)))
		require.NoError(t, err)
	}
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "out/huge", Typeflag: tar.TypeReg, Mode: 0o644, Size: math.MaxInt64}))
	head := buf.Bytes() // huge's contents follow: zeros, as long as anyone reads them
	p, written := fakeTreeDaemon(t, id, func(w io.Writer) {
		if _, err := w.Write(head); err != nil {
			return
		}
		zeros := make([]byte, 64<<10)
		for {
			if _, err := w.Write(zeros); err != nil {
				return
			}
		}
	})
	tree, err := p.ReadTree(t.Context(), h, "out", sandbox.TreeLimits{MaxFileBytes: 4, MaxTotalBytes: 4, MaxSkipBytes: 1 << 20})
	require.NoError(t, err)
	require.True(t, tree.Partial, "stopped at huge")
	require.Equal(t, []string{"a", "b", "huge"}, treePaths(tree))
	require.Equal(t, int64(math.MaxInt64), tree.Files[2].Size)
	require.Equal(t, "xxx", string(tree.Files[0].Data))
	require.Less(t, written.Load(), int64(16<<20), "huge was not read past")
}

func treePaths(tree sandbox.Tree) []string {
	out := []string{}
	for _, f := range tree.Files {
		out = append(out, f.Path)
	}
	return out
}

// A hard link past the total to a kept file gets that file's digest: taken once for the file, not
// once per link. 10,000 links (the most a tree lists) to a 10 MiB file were 100 GB to hash, over a
// minute of CPU on every collection, which no ctx could end.
func TestReadTreeHardLinksHashedOnce(t *testing.T) {
	const size, links = 1 << 20, 1000
	hdrs := []*tar.Header{{Name: "out/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "out/a", Size: size}}
	for i := range links {
		hdrs = append(hdrs, &tar.Header{Name: fmt.Sprintf("out/l%04d", i), Typeflag: tar.TypeLink, Linkname: "out/a", Mode: 0o644})
	}
	r := newTreeReader(sandbox.TreeLimits{MaxFileBytes: size, MaxTotalBytes: size}.WithDefaults(), "out")
	require.NoError(t, r.read(bytes.NewReader(tarOf(t, hdrs...))))
	require.Len(t, r.tree.Files, 1+links)
	sum := sha256.Sum256(bytes.Repeat([]byte("x"), size))
	for _, f := range r.tree.Files[1:] {
		require.False(t, f.Read, "%s is past the total", f.Path)
		require.Equal(t, hex.EncodeToString(sum[:]), f.SHA256, "%s has a's digest", f.Path)
	}
	require.Equal(t, int64(size), r.hashed, "a was hashed once")
}

// Entries a daemon should never send for a directory of the sandbox (a GNU sparse file of 4 GiB
// made of 3 bytes, an entry of an unknown type carrying megabytes) are listed unread, neither kept
// nor hashed (the sparse one is not expanded), their contents passed by the archive reader within
// the archive's bound, and the entries after them are read as usual. (The caller reads such a file
// on its own, if at all.)
func TestReadTreeEntriesNotRead(t *testing.T) {
	const id = "c0ffee"
	h := newHandle(id, handleState{Volume: "v", User: "1000:1000", UID: 1000, GID: 1000, WorkDir: "/workspace"})
	root := tarOf(t, &tar.Header{Name: "out/", Typeflag: tar.TypeDir, Mode: 0o755})
	root = root[:len(root)-1024] // without the end of the archive
	after := tarOf(t, &tar.Header{Name: "out/z-after", Size: 5})
	for _, tc := range []struct {
		name  string
		entry []byte
	}{
		{"gnu sparse", gnuSparse(t, "out/sparse", 4<<30, []byte("abc"))},
		{"unknown type", rawEntry(t, &tar.Header{Name: "out/unknown", Typeflag: 'Z', Size: 3 << 20, Mode: 0o644})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			archive := slices.Concat(root, tc.entry, after)
			p, _ := fakeTreeDaemon(t, id, func(w io.Writer) { _, _ = w.Write(archive) })
			tree, err := p.ReadTree(t.Context(), h, "out", sandbox.TreeLimits{MaxFileBytes: 1 << 20, MaxTotalBytes: 1 << 20, MaxSkipBytes: 1 << 20})
			require.NoError(t, err)
			require.False(t, tree.Partial)
			require.Len(t, tree.Files, 2)
			f := tree.Files[0]
			require.False(t, f.Read, f.Path)
			require.Nil(t, f.Data, f.Path)
			require.Empty(t, f.SHA256, f.Path)
			require.Equal(t, "xxxxx", string(tree.Files[1].Data), "the entry after it")
		})
	}
}

// gnuSparse is an old GNU sparse entry: data is the only data, at offset 0, of a file of realSize
// (under 8 GiB: octal fields).
// (archive/tar writes no sparse entries: its header is patched.)
func gnuSparse(t *testing.T, name string, realSize int64, data []byte) []byte {
	t.Helper()
	b := rawEntry(t, &tar.Header{Name: name, Typeflag: tar.TypeGNUSparse, Size: int64(len(data)), Mode: 0o644, Format: tar.FormatGNU}, data...)
	octal := func(field []byte, v int64) { copy(field, fmt.Sprintf("%0*o\x00", len(field)-1, v)) }
	blk := b[:512]
	octal(blk[386:398], 0)                     // the first data's offset
	octal(blk[398:410], int64(len(data)))      // and length
	octal(blk[483:495], realSize)              // the file's size
	copy(blk[148:156], strings.Repeat(" ", 8)) // the checksum, computed over blanks in its place
	sum := 0
	for _, c := range blk {
		sum += int(c)
	}
	copy(blk[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// rawEntry is one archive entry (no end of archive): hdr, then data, or hdr.Size bytes of "z".
func rawEntry(t *testing.T, hdr *tar.Header, data ...byte) []byte {
	t.Helper()
	if data == nil {
		data = bytes.Repeat([]byte("z"), int(hdr.Size))
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(hdr))
	_, err := tw.Write(data)
	require.NoError(t, err)
	require.NoError(t, tw.Flush())
	return buf.Bytes()
}

// A daemon that stops sending mid-archive (a remote one on a slow link) holds ReadTree no longer
// than ctx: it ends with ctx's error.
func TestReadTreeEndsWithCtx(t *testing.T) {
	const id = "c0ffee"
	h := newHandle(id, handleState{Volume: "v", User: "1000:1000", UID: 1000, GID: 1000, WorkDir: "/workspace"})
	archive := tarOf(t, &tar.Header{Name: "out/", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "out/big", Size: 1 << 20})
	sent, release := make(chan struct{}), make(chan struct{})
	p, _ := fakeTreeDaemon(t, id, func(w io.Writer) {
		_, _ = w.Write(archive[:64<<10]) // more than the server buffers: it reaches the client
		close(sent)
		<-release
	})
	t.Cleanup(func() { close(release) }) // before the server's cleanup, which waits for this handler
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-sent
		cancel()
	}()
	_, err := p.ReadTree(ctx, h, "out", sandbox.TreeLimits{MaxFileBytes: 1 << 20})
	require.ErrorIs(t, err, context.Canceled)
}
