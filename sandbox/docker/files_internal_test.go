package docker

import (
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
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
		})
	}
}
