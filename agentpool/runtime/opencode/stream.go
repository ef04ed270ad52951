package opencode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/internal/sse"
	"github.com/threadbox/threadbox/sandbox"
)

// events is a live subscription to the server's /event stream, pumped into c by one goroutine.
type events struct {
	c      chan event
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex // protects failed
	failed error
}

// subscribe opens /event and returns once the server confirmed the subscription (server.connected),
// so that no event of a prompt sent afterwards can be missed. The subscription outlives ctx (after a
// cancel it still tells when the abort took effect), but until the server confirms it ctx bounds the
// wait: a server that never answers must not hold a turn whose caller gave up.
func (r *Runtime) subscribe(callerCtx context.Context, sb sandbox.Sandbox) (*events, error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(callerCtx))
	stopWatch := context.AfterFunc(callerCtx, cancel)
	defer stopWatch()
	gaveUp := func() error {
		if callerCtx.Err() != nil {
			return fmt.Errorf("opencode: subscribing to events: %w", context.Cause(callerCtx))
		}
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://opencode/event", nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.SetBasicAuth(username, Password(r.cfg.Secret, sb.Handle().ID))
	req.Header.Set("Accept", "text/event-stream")
	resp, err := r.clients.Get(sb).Do(req)
	if err != nil {
		cancel()
		r.clients.Reset(sb)
		if err := gaveUp(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("opencode: subscribing to events: %w: %w", runtime.ErrSandboxDown, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		if resp.StatusCode == http.StatusUnauthorized {
			return nil, fmt.Errorf("opencode: subscribing to events: %w", errUnauthorized)
		}
		return nil, fmt.Errorf("opencode: subscribing to events: %w: %s", runtime.ErrSandboxDown, resp.Status)
	}
	rd := sse.NewReader(resp.Body, 0)
	first, err := rd.Next()
	var ev event
	if err == nil {
		err = json.Unmarshal(first.Data, &ev)
	}
	if err != nil || ev.Type != "server.connected" {
		resp.Body.Close()
		cancel()
		if err := gaveUp(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("opencode: subscribing to events: %w: first event %q: %v", runtime.ErrSandboxDown, ev.Type, err)
	}
	if !stopWatch() && callerCtx.Err() != nil {
		// ctx ended just as the server confirmed: the stream is cancelled already.
		resp.Body.Close()
		cancel()
		return nil, gaveUp()
	}
	e := &events{c: make(chan event, 64), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		defer close(e.c)
		defer resp.Body.Close()
		for {
			data, err := rd.Next()
			if err != nil {
				e.mu.Lock()
				e.failed = err
				e.mu.Unlock()
				return
			}
			var ev event
			if json.Unmarshal(data.Data, &ev) != nil {
				continue
			}
			select {
			case e.c <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return e, nil
}

// err is why the stream ended.
func (e *events) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failed
}

// close ends the subscription and waits for its goroutine.
func (e *events) close() {
	e.cancel()
	<-e.done
}
