package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox/sandboxtest"
)

// A minimal Chrome DevTools Protocol client over --remote-debugging-pipe: the browser reads
// NUL-terminated JSON commands on fd 3 and writes replies and events on fd 4. A pipe needs no port
// and no websocket library, and dies with the browser.

// chromiumFlags are the flags from the issue: headless, no sandbox (containers), and nothing that
// reaches the network on its own.
var chromiumFlags = []string{
	"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync",
	"--disable-dev-shm-usage", "--remote-debugging-pipe", "--window-size=1280,900",
}

type cdpReply struct {
	ID     int64           `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Method    string          `json:"method"`
	Params    json.RawMessage `json:"params"`
	SessionID string          `json:"sessionId"`
}

type browser struct {
	cmd  *exec.Cmd
	in   *os.File // the browser's fd 3
	done chan struct{}

	// mu protects the following.
	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan cdpReply
	// waiters are waiting for an event, keyed by session and method.
	waiters map[string][]chan json.RawMessage
	err     error
}

// chromiumPath finds Debian's chromium (THREADBOX_CHROMIUM overrides), or skips/fails the test.
func chromiumPath(t *testing.T) string {
	if p := os.Getenv("THREADBOX_CHROMIUM"); p != "" {
		return p
	}
	var err error
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		var p string
		if p, err = exec.LookPath(name); err == nil {
			return p
		}
	}
	sandboxtest.RequireService(t, "chromium (apt-get install chromium)", err)
	return ""
}

func startBrowser(t *testing.T) *browser {
	t.Helper()
	bin := chromiumPath(t)
	toBrowser, in, err := os.Pipe()
	require.NoError(t, err)
	out, fromBrowser, err := os.Pipe()
	require.NoError(t, err)
	args := append([]string{"--user-data-dir=" + t.TempDir()}, chromiumFlags...)
	cmd := exec.Command(bin, append(args, "about:blank")...)
	cmd.ExtraFiles = []*os.File{toBrowser, fromBrowser} // fd 3, fd 4
	cmd.Stderr = &logWriter{t: t}
	require.NoError(t, cmd.Start())
	toBrowser.Close()
	fromBrowser.Close()
	b := &browser{cmd: cmd, in: in, done: make(chan struct{}), pending: map[int64]chan cdpReply{}, waiters: map[string][]chan json.RawMessage{}}
	go b.read(out)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = b.call(ctx, "", "Browser.close", nil)
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-exited
		}
		in.Close()
		<-b.done
	})
	return b
}

func (b *browser) read(out *os.File) {
	defer close(b.done)
	defer out.Close()
	r := bufio.NewReaderSize(out, 1<<20)
	for {
		msg, err := r.ReadBytes(0)
		if err != nil {
			b.fail(fmt.Errorf("browser pipe: %w", err))
			return
		}
		var rep cdpReply
		if json.Unmarshal(msg[:len(msg)-1], &rep) != nil {
			continue
		}
		if rep.Method != "" {
			b.mu.Lock()
			key := rep.SessionID + "/" + rep.Method
			ws := b.waiters[key]
			delete(b.waiters, key)
			b.mu.Unlock()
			for _, w := range ws {
				w <- rep.Params
			}
			continue
		}
		b.mu.Lock()
		ch := b.pending[rep.ID]
		delete(b.pending, rep.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- rep
		}
	}
}

func (b *browser) fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.err = err
	for id, ch := range b.pending {
		close(ch)
		delete(b.pending, id)
	}
}

// expect registers interest in the next event method of session; register before causing it.
func (b *browser) expect(session, method string) <-chan json.RawMessage {
	ch := make(chan json.RawMessage, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	key := session + "/" + method
	b.waiters[key] = append(b.waiters[key], ch)
	return ch
}

// call sends a command (to a page when session is set) and waits for its reply.
func (b *browser) call(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	b.mu.Lock()
	if b.err != nil {
		b.mu.Unlock()
		return nil, b.err
	}
	b.nextID++
	id := b.nextID
	ch := make(chan cdpReply, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method, "params": params}
	if params == nil {
		msg["params"] = struct{}{}
	}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	if _, err := b.in.Write(append(data, 0)); err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	select {
	case rep, ok := <-ch:
		switch {
		case !ok:
			return nil, fmt.Errorf("%s: browser went away", method)
		case rep.Error != nil:
			return nil, fmt.Errorf("%s: %s (%d)", method, rep.Error.Message, rep.Error.Code)
		}
		return rep.Result, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// page is one tab.
type page struct {
	t       *testing.T
	b       *browser
	session string
}

func (b *browser) newPage(t *testing.T, width, height int) *page {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"})
	require.NoError(t, err)
	var target struct{ TargetID string }
	require.NoError(t, json.Unmarshal(res, &target))
	res, err = b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true})
	require.NoError(t, err)
	var att struct{ SessionID string }
	require.NoError(t, json.Unmarshal(res, &att))
	p := &page{t: t, b: b, session: att.SessionID}
	p.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false})
	p.call("Page.enable", nil)
	// In every document of this tab: the wait helper, and a record of errors and CSP violations.
	p.call("Page.addScriptToEvaluateOnNewDocument", map[string]any{"source": waitJS + pageErrorsJS})
	return p
}

func (p *page) call(method string, params any) json.RawMessage {
	p.t.Helper()
	// Longer than a page-side wait, so that its own, more telling, timeout error comes through.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout+30*time.Second)
	defer cancel()
	res, err := p.b.call(ctx, p.session, method, params)
	require.NoError(p.t, err)
	return res
}

// navigate opens url and waits for its load event.
func (p *page) navigate(url string) {
	p.t.Helper()
	loaded := p.b.expect(p.session, "Page.loadEventFired")
	res := p.call("Page.navigate", map[string]any{"url": url})
	var nav struct{ ErrorText string }
	require.NoError(p.t, json.Unmarshal(res, &nav))
	require.Empty(p.t, nav.ErrorText, "navigating to %s", url)
	select {
	case <-loaded:
	case <-time.After(waitTimeout):
		p.t.Fatalf("%s did not load within %s", url, waitTimeout)
	}
}

// eval runs an expression (awaiting a promise) and decodes its value into out.
func (p *page) eval(expr string, out any) {
	p.t.Helper()
	res := p.call("Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true})
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	require.NoError(p.t, json.Unmarshal(res, &r))
	if r.ExceptionDetails != nil {
		p.t.Fatalf("in the page: %s %s", r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	if out != nil && len(r.Result.Value) > 0 {
		require.NoError(p.t, json.Unmarshal(r.Result.Value, out))
	}
}

// waitJS is a page-side helper: it resolves with the first truthy value of fn, re-checking on every
// DOM change and on a short timer (an image finishing loading changes no DOM), or rejects after ms.
const waitJS = `window.__waitFor = (what, fn, ms) => new Promise((resolve, reject) => {
  let done = false, obs, timer, tick;
  const finish = (f, v) => { if (done) return; done = true; obs.disconnect(); clearTimeout(timer); clearInterval(tick); f(v); };
  const check = () => { try { const v = fn(); if (v) finish(resolve, v); } catch (e) { finish(reject, e); } };
  obs = new MutationObserver(check);
  obs.observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
  tick = setInterval(check, 50);
  timer = setTimeout(() => finish(reject, new Error('timed out waiting for ' + what + '; page text: ' + document.body.innerText.slice(-2000))), ms);
  check();
});`

const pageErrorsJS = `
window.__errors = [];
addEventListener('error', (e) => window.__errors.push('error: ' + e.message));
addEventListener('unhandledrejection', (e) => window.__errors.push('rejection: ' + e.reason));
addEventListener('securitypolicyviolation', (e) => window.__errors.push('csp: ' + e.violatedDirective + ' ' + e.blockedURI));`

// waitFor waits in the page until the JS expression cond is truthy and decodes its value.
func (p *page) waitFor(what, cond string, out any) {
	p.t.Helper()
	p.eval(fmt.Sprintf("window.__waitFor(%q, () => (%s), %d)", what, cond, waitTimeout.Milliseconds()), out)
}

func (p *page) screenshot() []byte {
	p.t.Helper()
	res := p.call("Page.captureScreenshot", map[string]any{"format": "png"})
	var shot struct{ Data []byte }
	require.NoError(p.t, json.Unmarshal(res, &shot)) // base64 in JSON decodes into []byte
	return shot.Data
}

// logWriter sends the browser's stderr to the test log, where it shows only on failure or -v.
type logWriter struct {
	t  *testing.T
	mu sync.Mutex
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer func() { _ = recover() }() // a log line after the test ended must not panic
	w.t.Logf("chromium: %s", p)
	return len(p), nil
}
