package web

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/agentpool/runtime/shell"
	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// waitTimeout bounds every wait for an event: generous, since a cold sandbox is created on the way.
const waitTimeout = 20 * time.Second

func newStore(t testing.TB) db.Store {
	t.Helper()
	st, err := db.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "tb.db"), db.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// stack is the real thing end to end: SQLite, the Docker provider, the shell runtime, a pool, the
// bot handler and admin, and the web server on a loopback httptest server.
type stack struct {
	t     *testing.T
	store db.Store
	pool  *agentpool.Pool
	admin *bot.Admin
	web   *Server
	ts    *httptest.Server
	prov  *docker.Provider
	dep   string
}

type stackOpts struct {
	admins  []string
	token   string
	warning string
}

func newStack(t *testing.T, o stackOpts) *stack {
	t.Helper()
	dep := "web-" + randomHex(4)
	prov := dockertest.New(t, docker.Options{Deployment: dep, StopTimeout: time.Second})
	log := zaptest.NewLogger(t)
	st := newStore(t)
	pool, err := agentpool.New(agentpool.Config{
		Deployment: dep, Image: dockertest.Image(),
		Resources: sandbox.Resources{MemoryMB: 512, CPUs: 0.5, PIDs: 64, ExecTimeout: 10 * time.Minute},
	}, agentpool.Deps{Store: st, Provider: prov, Runtime: shell.New(), Logger: log})
	require.NoError(t, err)
	t.Cleanup(func() {
		// Sandboxes outlive a pool by design; a test must not leave any behind.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		infos, err := prov.List(ctx, map[string]string{sandbox.LabelDeployment: dep})
		require.NoError(t, err)
		for _, in := range infos {
			require.NoError(t, prov.Destroy(ctx, in.Handle))
		}
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = pool.Shutdown(ctx)
	})
	admin := bot.NewAdmin(st, agentpool.Ops{Pool: pool}, o.admins, log)
	h := bot.NewHandler(bot.HandlerConfig{ProgressInterval: 50 * time.Millisecond}, pool, st, admin, log)
	srv, err := New(Options{Handler: h, Admin: admin, Directory: bot.NewDirectory(st), Token: o.token, TrustLoopback: true, Warning: o.warning, Logger: log})
	require.NoError(t, err)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(func() { require.NoError(t, srv.Close()) }) // before ts.Close: it ends the streams
	return &stack{t: t, store: st, pool: pool, admin: admin, web: srv, ts: ts, prov: prov, dep: dep}
}

// do sends a request and decodes a JSON answer into out (if not nil); it returns the status.
func do(t testing.TB, c *http.Client, method, url string, body io.Reader, hdr map[string]string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	if out != nil && len(data) > 0 {
		require.NoError(t, json.Unmarshal(data, out), "%s %s: %s", method, url, data)
	}
	return res.StatusCode
}

func jsonBody(t testing.TB, v any) io.Reader {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return bytes.NewReader(b)
}

var jsonHdr = map[string]string{"Content-Type": "application/json"}

func (s *stack) newConversation() conversationJSON {
	var c conversationJSON
	require.Equal(s.t, http.StatusCreated, do(s.t, s.ts.Client(), "POST", s.ts.URL+"/api/conversations", nil, nil, &c))
	require.Regexp(s.t, idPattern, c.ID)
	return c
}

// send posts a message and returns its event id.
func (s *stack) send(conv, text string) string {
	s.t.Helper()
	var acc acceptedJSON
	code := do(s.t, s.ts.Client(), "POST", s.ts.URL+"/api/conversations/"+conv+"/messages", jsonBody(s.t, messageJSON{Text: text}), jsonHdr, &acc)
	require.Equal(s.t, http.StatusAccepted, code)
	require.NotEmpty(s.t, acc.EventID)
	return acc.EventID
}

func (s *stack) conversation(id string) conversationDetailJSON {
	s.t.Helper()
	var c conversationDetailJSON
	require.Equal(s.t, http.StatusOK, do(s.t, s.ts.Client(), "GET", s.ts.URL+"/api/conversations/"+id, nil, nil, &c))
	return c
}

// eventStream is a test client of GET /api/conversations/{id}/events.
type eventStream struct {
	t  testing.TB
	ch chan Event

	mu  sync.Mutex // protects all
	all []Event
}

func (s *stack) stream(conv, cursor string) *eventStream {
	s.t.Helper()
	return openStream(s.t, s.ts.Client(), s.ts.URL+"/api/conversations/"+conv+"/events?after="+cursor, nil)
}

func openStream(t testing.TB, c *http.Client, url string, hdr map[string]string) *eventStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/event-stream; charset=utf-8", res.Header.Get("Content-Type"))
	es := &eventStream{t: t, ch: make(chan Event, 4096)}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev Event
			if json.Unmarshal([]byte(data), &ev) != nil {
				continue
			}
			es.mu.Lock()
			es.all = append(es.all, ev)
			es.mu.Unlock()
			es.ch <- ev
		}
		close(es.ch)
	}()
	return es
}

// waitFor returns the first event (from now on) that matches.
func (es *eventStream) waitFor(what string, match func(Event) bool) Event {
	es.t.Helper()
	timeout := time.NewTimer(waitTimeout)
	defer timeout.Stop()
	for {
		select {
		case ev, ok := <-es.ch:
			require.True(es.t, ok, "stream ended while waiting for %s", what)
			if match(ev) {
				return ev
			}
		case <-timeout.C:
			es.t.Fatalf("no %s within %s; events so far: %+v", what, waitTimeout, es.events())
		}
	}
}

func (es *eventStream) events() []Event {
	es.mu.Lock()
	defer es.mu.Unlock()
	return append([]Event(nil), es.all...)
}

// done waits for the turn's final reaction (✅ or ❌): every reply of that turn came before it.
func (es *eventStream) done(eventID string) Event {
	es.t.Helper()
	return es.waitFor("the end of "+eventID, func(ev Event) bool {
		return ev.Type == EventReaction && ev.ReplyTo == eventID && ev.Reaction != bot.ReactSeen
	})
}

// replies are the events answering eventID so far, of one type.
func (es *eventStream) replies(eventID, typ string) []Event {
	var out []Event
	for _, ev := range es.events() {
		if ev.ReplyTo == eventID && ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func postsText(evs []Event) string {
	var b strings.Builder
	for _, ev := range evs {
		b.WriteString(ev.Text)
		b.WriteString("\n")
	}
	return b.String()
}
