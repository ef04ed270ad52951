package agentpool

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	agentrt "github.com/threadbox/threadbox/agentpool/runtime"
	shellrt "github.com/threadbox/threadbox/agentpool/runtime/shell"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// daemonProxy stands between the provider and the real Docker socket, so a test can take "the daemon"
// away (as a restart does: connections cut, then refused) without touching the engine other tests
// share.
type daemonProxy struct {
	path, target string

	mu    sync.Mutex // protects the following
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func newDaemonProxy(t *testing.T) *daemonProxy {
	target := strings.TrimPrefix(os.Getenv("DOCKER_HOST"), "unix://")
	if target == "" {
		target = "/var/run/docker.sock"
	}
	p := &daemonProxy{path: filepath.Join(t.TempDir(), "docker.sock"), target: target, conns: map[net.Conn]bool{}}
	p.up(t)
	t.Cleanup(p.down)
	return p
}

func (p *daemonProxy) up(t *testing.T) {
	ln, err := net.Listen("unix", p.path)
	require.NoError(t, err)
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("unix", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[d] = true, true
			p.mu.Unlock()
			// A client's half-close (the end of an exec's stdin) is passed on as one, as the daemon's
			// own socket keeps the other direction open: closing the whole connection would cut the
			// exec's output.
			p.wg.Go(func() {
				if _, err := io.Copy(d, c); err == nil {
					_ = d.(*net.UnixConn).CloseWrite()
					return
				}
				_ = d.Close()
			})
			p.wg.Go(func() { _, _ = io.Copy(c, d); _ = c.Close(); _ = d.Close() })
		}
	})
}

// down cuts every connection and stops listening: clients get resets, then refusals.
func (p *daemonProxy) down() {
	p.mu.Lock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
	p.mu.Unlock()
	p.wg.Wait()
}

// TestDockerDaemonOutageHoldsTheTurn: with the daemon away between two turns, the second turn says it
// is waiting for the sandbox service instead of failing with the daemon's text, and answers, in the
// same sandbox, once the daemon is back.
func TestDockerDaemonOutageHoldsTheTurn(t *testing.T) {
	dep := "outage-" + randomSuffix()
	// Straight to the engine (this skips, or fails under THREADBOX_REQUIRE_SERVICES, without Docker),
	// for the cleanup; the pool's provider goes through the proxy.
	direct := dockertest.New(t, docker.Options{Deployment: dep})
	t.Cleanup(func() { destroyDeployment(t, direct, dep) })
	proxy := newDaemonProxy(t)
	prov := dockertest.New(t, docker.Options{Host: "unix://" + proxy.path, Deployment: dep})
	st := dbtest.OpenPostgres(t)
	f := newFixture(t, st, prov, shellrt.New(), func(c *Config) { c.Deployment = dep; c.Image = dockertest.Image() })

	first := newCollector()
	submit(t, f.pool, "web:outage", "e1", "echo kept > notes.txt && echo first", first)
	require.NoError(t, first.wait(t, 1)[0].Err)

	proxy.down()
	waiting := make(chan struct{})
	var once sync.Once
	sink := newCollector()
	submit(t, f.pool, "web:outage", "e2", "cat notes.txt", SinkFuncs{
		ProgressFunc: func(ev agentrt.Event) {
			if ev.Kind == agentrt.EventStatus && ev.Note == NoteWaitingForProvider {
				once.Do(func() { close(waiting) })
			}
		},
		DeliverFunc: sink.Deliver,
	})
	select {
	case <-waiting:
	case out := <-sink.got:
		t.Fatalf("the turn ended instead of waiting: %v", out.Err)
	}
	proxy.up(t) // the daemon is back
	out := sink.wait(t, 1)[0]
	require.NoError(t, out.Err)
	require.Equal(t, "kept", out.Answer, "the same sandbox, files intact")
	require.Empty(t, out.Recreate)
	s := sessionStatus(t, st, "web:outage")
	require.Equal(t, int64(1), s.Generation)
	require.Zero(t, s.ResumeFailCount, "an outage is no failed resume")
}
