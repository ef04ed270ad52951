package docker

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
)

// fakeArchiveDaemon answers the archive endpoints the way the engine does for one container, alive
// or removed: every directory below /workspace exists, nothing else does. A missing path is a 404
// whose message names the path (the body of a HEAD answer is empty); a missing container is a 404
// "No such container" everywhere.
func fakeArchiveDaemon(t *testing.T, id string, alive bool) *Provider {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		notFound := func(msg string) {
			w.WriteHeader(http.StatusNotFound)
			if r.Method != http.MethodHead {
				_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
			}
		}
		if !alive {
			notFound("No such container: " + id)
			return
		}
		switch {
		case strings.HasSuffix(r.URL.Path, "/containers/"+id+"/json"):
			_ = json.NewEncoder(w).Encode(map[string]any{"Id": id, "State": map[string]any{"Status": "running"}})
		case strings.HasSuffix(r.URL.Path, "/containers/"+id+"/archive"):
			p := r.URL.Query().Get("path")
			if r.Method == http.MethodHead && strings.HasPrefix(p, "/workspace/") && !strings.HasSuffix(p, "/x") {
				stat, _ := json.Marshal(map[string]any{"name": p, "mode": uint32(fs.ModeDir | 0o755), "mtime": time.Now()})
				w.Header().Set("X-Docker-Container-Path-Stat", base64.StdEncoding.EncodeToString(stat))
				return
			}
			notFound("Could not find the file " + p + " in container " + id)
		default:
			http.Error(w, "unexpected "+r.URL.Path, http.StatusTeapot)
		}
	}))
	t.Cleanup(srv.Close)
	cli, err := client.NewClientWithOpts(client.WithHost("tcp://"+srv.Listener.Addr().String()), client.WithVersion("1.45"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return &Provider{cli: cli, log: zap.NewNop(), stopTimeout: time.Second, cpu: cpuSamples{last: map[string]cpuSample{}}}
}

// The archive endpoints answer 404 both for a missing path and for a missing container. A missing
// file must read as fs.ErrNotExist even when the agent named its directory "No such container" (the
// path is in the daemon's message), and a removed container must read as ErrNotFound even when the
// first 404 comes from a HEAD stat, which has no message at all.
func TestFilesMissingPathOrContainer(t *testing.T) {
	const id = "c0ffee"
	h := newHandle(id, handleState{Volume: "v", User: "1000:1000", UID: 1000, GID: 1000, WorkDir: "/workspace"})
	for _, tc := range []struct {
		name  string
		alive bool
		path  string
		want  error
		never error
	}{
		{"missing file in a dir named like the daemon's message", true, "output/No such container/x", fs.ErrNotExist, sandbox.ErrNotFound},
		{"missing file", true, "output/display/x", fs.ErrNotExist, sandbox.ErrNotFound},
		{"removed container, nested path", false, "output/display/x", sandbox.ErrNotFound, fs.ErrNotExist},
		{"removed container, top-level path", false, "x", sandbox.ErrNotFound, fs.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fakeArchiveDaemon(t, id, tc.alive)
			_, err := p.ReadFile(t.Context(), h, tc.path, 100)
			require.ErrorIs(t, err, tc.want, "read")
			require.NotErrorIs(t, err, tc.never, "read")
			_, err = p.ListFiles(t.Context(), h, tc.path)
			require.ErrorIs(t, err, tc.want, "list")
			require.NotErrorIs(t, err, tc.never, "list")
			_, err = p.ReadTree(t.Context(), h, tc.path, sandbox.TreeLimits{})
			require.ErrorIs(t, err, tc.want, "read tree")
			require.NotErrorIs(t, err, tc.never, "read tree")
		})
	}
}

// fakeRewrittenFile serves a work directory holding out/ with the file out/a (100 bytes) and out/z.
// Its first short answers for each path end inside a's contents, as the daemon's archive does when
// a shrank (was rewritten) between its header and its bytes.
func fakeRewrittenFile(t *testing.T, id string, short int) *Provider {
	t.Helper()
	archive := func(entries []string, cut bool) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, name := range entries {
			hdr := &tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeReg}
			if strings.HasSuffix(name, "/") {
				hdr.Mode, hdr.Typeflag = 0o755, tar.TypeDir
			}
			data := []byte(strings.Repeat("x", 100))
			if hdr.Typeflag == tar.TypeReg {
				hdr.Size = int64(len(data))
			}
			require.NoError(t, tw.WriteHeader(hdr))
			if hdr.Typeflag == tar.TypeReg {
				_, err := tw.Write(data)
				require.NoError(t, err)
			}
			if cut && path.Base(name) == "a" {
				require.NoError(t, tw.Flush())
				return buf.Bytes()[:buf.Len()-512+10] // a's header and 10 of its bytes, then the end
			}
		}
		require.NoError(t, tw.Close())
		return buf.Bytes()
	}
	var mu sync.Mutex
	gets := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Query().Get("path")
		if !strings.HasSuffix(r.URL.Path, "/containers/"+id+"/archive") {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"Id": id, "State": map[string]any{"Status": "running"}})
			return
		}
		mode, entries := fs.ModeDir|0o755, []string{"out/", "out/a", "out/z"}
		if p == "/workspace/out/a" {
			mode, entries = 0o644, []string{"a"}
		}
		stat, _ := json.Marshal(map[string]any{"name": path.Base(p), "mode": uint32(mode), "size": 100, "mtime": time.Now()})
		w.Header().Set("X-Docker-Container-Path-Stat", base64.StdEncoding.EncodeToString(stat))
		if r.Method == http.MethodHead {
			return
		}
		mu.Lock()
		gets[p]++
		cut := gets[p] <= short
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-tar")
		_, _ = w.Write(archive(entries, cut))
	}))
	t.Cleanup(srv.Close)
	cli, err := client.NewClientWithOpts(client.WithHost("tcp://"+srv.Listener.Addr().String()), client.WithVersion("1.45"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return &Provider{cli: cli, log: zap.NewNop(), stopTimeout: time.Second, cpu: cpuSamples{last: map[string]cpuSample{}}}
}

// A file the sandbox rewrites while it is archived ends the archive short. That is a race with the
// agent, not a broken sandbox: the read and the listing are tried again, and only an archive that
// keeps ending short is an error (a listing error costs the turn every artifact).
func TestFilesRewrittenWhileRead(t *testing.T) {
	const id = "c0ffee"
	h := newHandle(id, handleState{Volume: "v", User: "1000:1000", UID: 1000, GID: 1000, WorkDir: "/workspace"})

	p := fakeRewrittenFile(t, id, 2)
	list, err := p.ListFiles(t.Context(), h, "out")
	require.NoError(t, err)
	require.Len(t, list, 2)
	data, err := p.ReadFile(t.Context(), h, "out/a", 1000)
	require.NoError(t, err)
	require.Len(t, data, 100)
	p = fakeRewrittenFile(t, id, 2) // its first two archives of out end short again
	tree, err := p.ReadTree(t.Context(), h, "out", sandbox.TreeLimits{})
	require.NoError(t, err)
	require.Len(t, tree.Files, 2)
	require.Len(t, tree.Files[0].Data, 100)

	p = fakeRewrittenFile(t, id, 1000)
	_, err = p.ListFiles(t.Context(), h, "out")
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	_, err = p.ReadFile(t.Context(), h, "out/a", 1000)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	_, err = p.ReadTree(t.Context(), h, "out", sandbox.TreeLimits{})
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
}
