package deno_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/deno"
	"github.com/threadbox/threadbox/sandbox/deno/denofake"
)

// Each benchmark times the provider's operation and the same operation done with raw calls to the
// fake (the fewest requests the protocol allows: for create a volume and the socket; for pause the
// kill, the snapshot retried until the volume has detached, the wait for the job, the volume's
// delete; for resume a volume from the snapshot and the socket), both in every iteration, in
// alternating order, so that drift and load hit both alike. The ratio is the overhead of our layer:
//
//	ns/op         the provider
//	raw-ns/op     raw calls to the fake
//	ratio         provider / raw (means)
//	median-ratio  the same with medians, steadier on a busy machine
//
// go test -run '^$' -bench . -benchtime=5x ./sandbox/deno/

type pair struct{ provider, raw []time.Duration }

func (p pair) report(b *testing.B) {
	sum := func(ds []time.Duration) (t time.Duration) {
		for _, d := range ds {
			t += d
		}
		return t
	}
	median := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2]
	}
	b.ReportMetric(float64(sum(p.provider).Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(sum(p.raw).Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(sum(p.provider))/float64(sum(p.raw)), "ratio")
	b.ReportMetric(float64(median(p.provider))/float64(median(p.raw)), "median-ratio")
}

func both(i int, provider, raw func()) {
	if i%2 == 0 {
		provider()
		raw()
		return
	}
	raw()
	provider()
}

func timed(b *testing.B, d *[]time.Duration, f func() error) {
	b.Helper()
	start := time.Now()
	err := f()
	*d = append(*d, time.Since(start))
	require.NoError(b, err)
}

// raw is a bare client of the fake.
type raw struct {
	f *denofake.Fake
	n int
}

func (r *raw) req(ctx context.Context, method, url string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	if !strings.HasPrefix(url, "http") {
		url = r.f.ConsoleURL() + url
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+denofake.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

func (r *raw) must(ctx context.Context, method, url string, body any) ([]byte, error) {
	status, data, err := r.req(ctx, method, url, body)
	if err == nil && status >= 300 {
		err = fmt.Errorf("%s %s: %d %s", method, url, status, data)
	}
	return data, err
}

// boot makes a volume from `from` and boots it; it returns the socket and the sandbox id.
func (r *raw) boot(ctx context.Context, vol, from string) (*websocket.Conn, string, error) {
	if _, err := r.must(ctx, http.MethodPost, "/api/v2/volumes", map[string]any{"slug": vol, "region": "ord", "capacity": "1GB", "from": from}); err != nil {
		return nil, "", err
	}
	cfg, _ := json.Marshal(map[string]any{"stop_at_ms": time.Now().Add(30 * time.Minute).UnixMilli(), "memory_mb": 1280, "volumes": []any{}, "root": map[string]string{"volume": vol}})
	hdr := http.Header{"Authorization": {"Bearer " + denofake.Token}, "X-Deno-Sandbox-Config": {base64.StdEncoding.EncodeToString(cfg)}}
	u := "ws" + strings.TrimPrefix(strings.ReplaceAll(r.f.SandboxURL(), "{region}", "ord"), "http") + "/api/v3/sandboxes/create"
	ws, resp, err := websocket.DefaultDialer.DialContext(ctx, u, hdr)
	if err != nil {
		return nil, "", err
	}
	return ws, resp.Header.Get("x-deno-sandbox-id"), nil
}

// pause kills the sandbox and turns its volume into a snapshot.
func (r *raw) pause(ctx context.Context, ws *websocket.Conn, id, vol, snap string) error {
	if _, err := r.must(ctx, http.MethodDelete, strings.ReplaceAll(r.f.SandboxURL(), "{region}", "ord")+"/api/v3/sandbox/"+id, nil); err != nil {
		return err
	}
	_ = ws.Close()
	for {
		status, data, err := r.req(ctx, http.MethodPost, "/api/v2/volumes/"+vol+"/snapshot", map[string]string{"slug": snap})
		if err != nil {
			return err
		}
		if status == http.StatusOK {
			break
		}
		if status != http.StatusInternalServerError {
			return fmt.Errorf("snapshot: %d %s", status, data)
		}
		time.Sleep(10 * time.Millisecond) // the raw client polls as the provider's backoff does
	}
	for {
		data, err := r.must(ctx, http.MethodGet, "/api/v2/snapshots/"+snap, nil)
		if err != nil {
			return err
		}
		var s struct {
			Bootable bool `json:"is_bootable"`
		}
		if json.Unmarshal(data, &s) == nil && s.Bootable {
			break
		}
		time.Sleep(10 * time.Millisecond) // the same polling, as the provider waits for a bootable snapshot
	}
	_, err := r.must(ctx, http.MethodDelete, "/api/v2/volumes/"+vol, nil)
	return err
}

func (r *raw) slug(kind string) string {
	r.n++
	return fmt.Sprintf("raw%s%d", kind, r.n)
}

// cleanup kills a raw sandbox and deletes its volume and snapshot, best effort, outside the timers.
func (r *raw) cleanup(ctx context.Context, ws *websocket.Conn, id string, slugs ...string) {
	if ws != nil {
		_, _, _ = r.req(ctx, http.MethodDelete, strings.ReplaceAll(r.f.SandboxURL(), "{region}", "ord")+"/api/v3/sandbox/"+id, nil)
		_ = ws.Close()
		_ = r.f.WaitDetached(ctx, id)
	}
	for _, s := range slugs {
		_, _, _ = r.req(ctx, http.MethodDelete, "/api/v2/volumes/"+s, nil)
	}
	for _, s := range slugs {
		_, _, _ = r.req(ctx, http.MethodDelete, "/api/v2/snapshots/"+s, nil)
	}
}

func benchSetup(b *testing.B) (*deno.Provider, *raw, sandbox.Spec) {
	f := newFake(b, nil)
	p := newProvider(b, f, nil)
	return p, &raw{f: f}, sandbox.Spec{Image: baseSnapshot, Labels: sandbox.Labels{Deployment: "deno-bench", Thread: "bench", Generation: 1}}
}

func BenchmarkCreate(b *testing.B) {
	p, r, sp := benchSetup(b)
	ctx := context.Background()
	var pr pair
	for i := range b.N {
		var h sandbox.Handle
		var ws *websocket.Conn
		var id, vol string
		both(i, func() {
			timed(b, &pr.provider, func() (err error) { h, err = p.Create(ctx, sp); return err })
		}, func() {
			vol = r.slug("v")
			timed(b, &pr.raw, func() (err error) { ws, id, err = r.boot(ctx, vol, baseSnapshot); return err })
		})
		require.NoError(b, p.Destroy(ctx, h))
		r.cleanup(ctx, ws, id, vol)
	}
	pr.report(b)
}

func BenchmarkPause(b *testing.B) {
	p, r, sp := benchSetup(b)
	ctx := context.Background()
	var pr pair
	for i := range b.N {
		h, err := p.Create(ctx, sp)
		require.NoError(b, err)
		vol, snap := r.slug("v"), r.slug("s")
		ws, id, err := r.boot(ctx, vol, baseSnapshot)
		require.NoError(b, err)
		both(i, func() {
			timed(b, &pr.provider, func() error { return p.Stop(ctx, h) })
		}, func() {
			timed(b, &pr.raw, func() error { return r.pause(ctx, ws, id, vol, snap) })
		})
		require.NoError(b, p.Destroy(ctx, h))
		r.cleanup(ctx, nil, "", vol, snap)
	}
	pr.report(b)
}

func BenchmarkResume(b *testing.B) {
	p, r, sp := benchSetup(b)
	ctx := context.Background()
	var pr pair
	for i := range b.N {
		h, err := p.Create(ctx, sp)
		require.NoError(b, err)
		require.NoError(b, p.Stop(ctx, h))
		vol, snap, vol2 := r.slug("v"), r.slug("s"), r.slug("v")
		ws, id, err := r.boot(ctx, vol, baseSnapshot)
		require.NoError(b, err)
		require.NoError(b, r.pause(ctx, ws, id, vol, snap))
		var ws2 *websocket.Conn
		var id2 string
		both(i, func() {
			timed(b, &pr.provider, func() error { return p.Start(ctx, h) })
		}, func() {
			timed(b, &pr.raw, func() (err error) { ws2, id2, err = r.boot(ctx, vol2, snap); return err })
		})
		require.NoError(b, p.Destroy(ctx, h))
		r.cleanup(ctx, ws2, id2, vol2, snap)
	}
	pr.report(b)
}
