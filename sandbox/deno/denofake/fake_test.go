package denofake_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox/deno/denofake"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// These tests prove the fake strict: each of Deno's rules it claims to enforce is broken on purpose,
// with raw requests, and the fake must refuse with Deno's error shape.

var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newFake(t *testing.T, mod func(*denofake.Options)) *denofake.Fake {
	t.Helper()
	opts := denofake.Options{Backend: dockertest.New(t, docker.Options{}), Image: dockertest.Image(), Snapshots: []string{"base"}}
	if mod != nil {
		mod(&opts)
	}
	return denofake.New(t, opts)
}

type answer struct {
	status int
	code   string
	body   json.RawMessage
	header http.Header
}

func call(t *testing.T, f *denofake.Fake, token, method, url string, body any) answer {
	t.Helper()
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		require.NoError(t, err)
		r = bytes.NewReader(data)
	}
	if !strings.HasPrefix(url, "http") {
		url = f.ConsoleURL() + url
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, r)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	a := answer{status: resp.StatusCode, body: data, header: resp.Header}
	if resp.StatusCode >= 300 {
		var e struct{ Code, Message string }
		require.NoError(t, json.Unmarshal(data, &e), "error body %s", data)
		require.NotEmpty(t, e.Message, "Deno's error shape has a message")
		a.code = e.Code
	}
	return a
}

func host(f *denofake.Fake, region, path string) string {
	return strings.ReplaceAll(f.SandboxURL(), "{region}", region) + path
}

// boot opens a create socket with cfg; it returns the socket (nil on refusal) and the handshake answer.
func boot(t *testing.T, f *denofake.Fake, cfg map[string]any) (*websocket.Conn, string, answer) {
	t.Helper()
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	hdr := http.Header{"Authorization": {"Bearer " + denofake.Token}, "X-Deno-Sandbox-Config": {base64.StdEncoding.EncodeToString(raw)}}
	u := "ws" + strings.TrimPrefix(host(f, "ord", "/api/v3/sandboxes/create"), "http")
	ws, resp, err := websocket.DefaultDialer.DialContext(t.Context(), u, hdr)
	if err != nil {
		require.NotNil(t, resp, "handshake failed without an answer: %v", err)
		data, _ := io.ReadAll(resp.Body)
		var e struct{ Code, Message string }
		require.NoError(t, json.Unmarshal(data, &e), "error body %s", data)
		return nil, "", answer{status: resp.StatusCode, code: e.Code}
	}
	t.Cleanup(func() { _ = ws.Close() })
	id := resp.Header.Get("x-deno-sandbox-id")
	require.Regexp(t, `^sbx_ord_[0-9a-hjkmnp-z]{20}$`, id)
	return ws, id, answer{status: resp.StatusCode}
}

func config(f *denofake.Fake, clock *denofake.Clock, root string, labels map[string]string) map[string]any {
	now := time.Now()
	if clock != nil {
		now = clock.Now()
	}
	cfg := map[string]any{"stop_at_ms": now.Add(10 * time.Minute).UnixMilli(), "memory_mb": 1280, "volumes": []any{}, "labels": labels}
	if root != "" {
		cfg["root"] = map[string]string{"volume": root}
	}
	return cfg
}

func mkVolume(t *testing.T, f *denofake.Fake, slug, from string) answer {
	body := map[string]any{"slug": slug, "region": "ord", "capacity": "1GB"}
	if from != "" {
		body["from"] = from
	}
	return call(t, f, denofake.Token, http.MethodPost, "/api/v2/volumes", body)
}

func kill(t *testing.T, f *denofake.Fake, id string) {
	t.Helper()
	a := call(t, f, denofake.Token, http.MethodDelete, host(f, "ord", "/api/v3/sandbox/"+id), nil)
	require.Equal(t, http.StatusOK, a.status)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.NoError(t, f.WaitDetached(ctx, id))
}

func TestAuth(t *testing.T) {
	f := newFake(t, nil)
	a := call(t, f, "ddo_wrong", http.MethodGet, "/api/v2/volumes", nil)
	require.Equal(t, http.StatusUnauthorized, a.status)
	require.Equal(t, "INVALID_TOKEN", a.code)

	g := newFake(t, func(o *denofake.Options) { o.Token, o.Org = "ddp_personal", "acme" })
	a = call(t, g, "ddp_personal", http.MethodGet, "/api/v2/volumes", nil)
	require.Equal(t, http.StatusBadRequest, a.status, "a personal token without X-Deno-Org")
}

func TestSlugRules(t *testing.T) {
	f := newFake(t, nil)
	for _, slug := range []string{"a", "Upper", "under_score", "-lead", "trail-", "ab--cd", strings.Repeat("x", 33), "dot.s"} {
		a := mkVolume(t, f, slug, "")
		require.Equal(t, http.StatusBadRequest, a.status, "slug %q", slug)
		require.Equal(t, "INVALID_SLUG", a.code, "slug %q", slug)
	}
	for _, slug := range []string{"ab", "a-b--c", strings.Repeat("x", 32), "0-9"} {
		require.Equal(t, http.StatusOK, mkVolume(t, f, slug, "").status, "slug %q", slug)
	}
	// One namespace for volumes and snapshots.
	a := mkVolume(t, f, "base", "")
	require.Equal(t, http.StatusConflict, a.status, "a volume named like a snapshot")
	require.Equal(t, "SLUG_ALREADY_EXISTS", a.code)
	a = call(t, f, denofake.Token, http.MethodPost, "/api/v2/volumes/ab/snapshot", map[string]string{"slug": "a-b--c"})
	require.Equal(t, http.StatusConflict, a.status, "a snapshot named like a volume")
}

func TestVolumeFields(t *testing.T) {
	f := newFake(t, nil)
	for _, body := range []map[string]any{
		{"slug": "cap-low", "region": "ord", "capacity": "100MB"},
		{"slug": "cap-high", "region": "ord", "capacity": 21e9},
		{"slug": "cap-unit", "region": "ord", "capacity": "1 parsec"},
		{"slug": "region", "region": "fra", "capacity": "1GB"},
		{"slug": "from", "region": "ord", "capacity": "1GB", "from": "builtin:windows"},
		{"slug": "unknown", "region": "ord", "capacity": "1GB", "size": 1},
	} {
		a := call(t, f, denofake.Token, http.MethodPost, "/api/v2/volumes", body)
		require.Equal(t, http.StatusBadRequest, a.status, "%v", body)
	}
	a := mkVolume(t, f, "no-such-from", "nope")
	require.Equal(t, http.StatusNotFound, a.status)
	a = call(t, f, denofake.Token, http.MethodPost, "/api/v2/volumes", map[string]any{"slug": "ams-vol", "region": "ams", "capacity": "1GB", "from": "base"})
	require.Equal(t, http.StatusNotFound, a.status, "a snapshot of ord is not in ams")
	a = mkVolume(t, f, "ok-vol", "base")
	require.Equal(t, http.StatusOK, a.status)
	var v map[string]any
	require.NoError(t, json.Unmarshal(a.body, &v))
	require.Equal(t, true, v["is_bootable"])
	require.Equal(t, "base", v["base_snapshot"].(map[string]any)["slug"])
}

func TestPagination(t *testing.T) {
	f := newFake(t, func(o *denofake.Options) { o.PageSize = 2 })
	for i := range 5 {
		require.Equal(t, http.StatusOK, mkVolume(t, f, fmt.Sprintf("page-%d", i), "").status)
	}
	var slugs []string
	url := "/api/v2/volumes?search=page-"
	for url != "" {
		a := call(t, f, denofake.Token, http.MethodGet, url, nil)
		require.Equal(t, http.StatusOK, a.status)
		var page []struct{ Slug string }
		require.NoError(t, json.Unmarshal(a.body, &page))
		require.LessOrEqual(t, len(page), 2)
		for _, v := range page {
			slugs = append(slugs, v.Slug)
		}
		url = ""
		if l := a.header.Get("Link"); l != "" {
			url = strings.TrimSuffix(strings.TrimPrefix(strings.Split(l, ";")[0], "<"), ">")
		}
	}
	require.Equal(t, []string{"page-0", "page-1", "page-2", "page-3", "page-4"}, slugs)
}

func TestBootRules(t *testing.T) {
	clock := denofake.NewClock(start)
	f := newFake(t, func(o *denofake.Options) { o.Clock, o.MaxRunning = clock, 1 })
	require.Equal(t, http.StatusOK, mkVolume(t, f, "root-a", "base").status)
	require.Equal(t, http.StatusOK, mkVolume(t, f, "blank", "").status)

	six := map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6"}
	_, _, a := boot(t, f, config(f, clock, "root-a", six))
	require.Equal(t, "TOO_MANY_LABELS", a.code, "at most 5 labels")
	_, _, a = boot(t, f, config(f, clock, "root-a", map[string]string{strings.Repeat("k", 65): "v"}))
	require.Equal(t, "INVALID_LABEL", a.code, "label keys of at most 64 bytes")
	_, _, a = boot(t, f, config(f, clock, "blank", nil))
	require.Equal(t, "INVALID_ROOT", a.code, "an empty volume is not bootable")
	cfg := config(f, clock, "root-a", nil)
	cfg["stop_at_ms"] = clock.Now().Add(31 * time.Minute).UnixMilli()
	_, _, a = boot(t, f, cfg)
	require.Equal(t, "INVALID_CONFIG", a.code, "a lifetime over 30 minutes")
	cfg = config(f, clock, "root-a", nil)
	cfg["memory_mb"] = 512
	_, _, a = boot(t, f, cfg)
	require.Equal(t, "INVALID_CONFIG", a.code, "memory below 768 MiB")

	ws, id, _ := boot(t, f, config(f, clock, "root-a", map[string]string{"k": "v"}))
	require.NotNil(t, ws)
	require.Equal(t, http.StatusOK, mkVolume(t, f, "root-b", "base").status)
	_, _, a = boot(t, f, config(f, clock, "root-b", nil))
	require.Equal(t, http.StatusTooManyRequests, a.status, "the concurrency limit")
	require.Equal(t, "SANDBOX_LIMIT_EXCEEDED", a.code)
	_, _, a = boot(t, f, config(f, clock, "root-a", nil))
	require.Contains(t, []string{"VOLUME_IN_USE", "SANDBOX_LIMIT_EXCEEDED"}, a.code)

	// Snapshot and delete of an attached volume are refused.
	a = call(t, f, denofake.Token, http.MethodPost, "/api/v2/volumes/root-a/snapshot", map[string]string{"slug": "snap-a"})
	require.Equal(t, http.StatusInternalServerError, a.status, "no snapshot of an attached volume (a 500, as seed 001 saw)")
	a = call(t, f, denofake.Token, http.MethodDelete, "/api/v2/volumes/root-a", nil)
	require.Equal(t, http.StatusConflict, a.status)
	require.Equal(t, "VOLUME_IN_USE", a.code)

	kill(t, f, id)
	a = call(t, f, denofake.Token, http.MethodPost, "/api/v2/volumes/root-a/snapshot", map[string]string{"slug": "snap-a"})
	require.Equal(t, http.StatusOK, a.status, "a detached volume can be snapshotted")
	_, _, a = boot(t, f, config(f, clock, "root-b", nil))
	require.Equal(t, http.StatusSwitchingProtocols, a.status, "the killed sandbox no longer counts")
}

func TestSnapshotReferences(t *testing.T) {
	f := newFake(t, nil)
	require.Equal(t, http.StatusOK, mkVolume(t, f, "src", "base").status)
	a := call(t, f, denofake.Token, http.MethodPost, "/api/v2/volumes/src/snapshot", map[string]string{"slug": "snap"})
	require.Equal(t, http.StatusOK, a.status)
	require.Eventually(t, func() bool {
		var s struct {
			Bootable bool `json:"is_bootable"`
		}
		a := call(t, f, denofake.Token, http.MethodGet, "/api/v2/snapshots/snap", nil)
		return json.Unmarshal(a.body, &s) == nil && s.Bootable
	}, 10*time.Second, 10*time.Millisecond, "the snapshot job finishes")
	require.Equal(t, http.StatusOK, mkVolume(t, f, "child", "snap").status)

	a = call(t, f, denofake.Token, http.MethodDelete, "/api/v2/snapshots/snap", nil)
	require.Equal(t, http.StatusConflict, a.status, "a snapshot a volume was made from stays")
	require.Equal(t, "SNAPSHOT_IN_USE", a.code)
	require.Equal(t, http.StatusNoContent, call(t, f, denofake.Token, http.MethodDelete, "/api/v2/volumes/child", nil).status)
	require.Equal(t, http.StatusNoContent, call(t, f, denofake.Token, http.MethodDelete, "/api/v2/snapshots/snap", nil).status,
		"volumes that reference it first, then the snapshot")
	require.Equal(t, http.StatusNotFound, call(t, f, denofake.Token, http.MethodDelete, "/api/v2/snapshots/snap", nil).status)
}

func TestSourceDeletedUnderSnapshotJob(t *testing.T) {
	f := newFake(t, nil)
	require.Equal(t, http.StatusOK, mkVolume(t, f, "src", "base").status)
	release := f.HoldSnapshotJobs()
	defer release()
	require.Equal(t, http.StatusOK, call(t, f, denofake.Token, http.MethodPost, "/api/v2/volumes/src/snapshot", map[string]string{"slug": "snap"}).status)
	a := call(t, f, denofake.Token, http.MethodDelete, "/api/v2/volumes/src", nil)
	require.Equal(t, http.StatusInternalServerError, a.status)
	require.Equal(t, "JOB_IS_DEAD", a.code, "seed 001: deleting the source kills the job")
	release()
	a = mkVolume(t, f, "from-dead", "snap")
	require.Equal(t, http.StatusBadRequest, a.status, "a dead snapshot never becomes bootable")
}

func TestLifetime(t *testing.T) {
	clock := denofake.NewClock(start)
	f := newFake(t, func(o *denofake.Options) { o.Clock = clock })
	require.Equal(t, http.StatusOK, mkVolume(t, f, "life", "base").status)
	ws, id, _ := boot(t, f, config(f, clock, "life", nil)) // deadline: start + 10 min
	require.Equal(t, start.Add(10*time.Minute), f.Deadline(id))

	extend := func(to time.Time) answer {
		return call(t, f, denofake.Token, http.MethodPatch, host(f, "ord", "/api/v3/sandbox/"+id), map[string]int64{"stop_at_ms": to.UnixMilli()})
	}
	a := extend(clock.Now().Add(2 * time.Hour))
	require.Equal(t, http.StatusOK, a.status)
	var got struct {
		StopAtMs int64 `json:"stop_at_ms"`
	}
	require.NoError(t, json.Unmarshal(a.body, &got))
	require.Equal(t, start.Add(30*time.Minute).UnixMilli(), got.StopAtMs, "at most +30 minutes per extension")
	require.Equal(t, http.StatusBadRequest, extend(clock.Now().Add(-time.Minute)).status)
	a = call(t, f, denofake.Token, http.MethodPatch, host(f, "ams", "/api/v3/sandbox/"+id), map[string]int64{"stop_at_ms": 1})
	require.Equal(t, http.StatusNotFound, a.status, "the host of another region does not know it")

	clock.Advance(29 * time.Minute)
	require.Equal(t, 1, f.Running())
	clock.Advance(time.Minute)
	require.Equal(t, 0, f.Running(), "stopped at its deadline")
	_, _, err := ws.ReadMessage()
	var ce *websocket.CloseError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, websocket.CloseNormalClosure, ce.Code, "the socket closes normally when the sandbox times out")
	require.Equal(t, http.StatusNotFound, extend(clock.Now().Add(time.Minute)).status, "a stopped sandbox is not extended")
}

func TestRPCProtocol(t *testing.T) {
	f := newFake(t, nil)
	require.Equal(t, http.StatusOK, mkVolume(t, f, "rpc", "base").status)
	ws, _, _ := boot(t, f, config(f, nil, "rpc", nil))
	send := func(v string) map[string]any {
		require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(v)))
		for {
			_, data, err := ws.ReadMessage()
			require.NoError(t, err)
			if string(data) == "pong" {
				return map[string]any{"pong": true}
			}
			var m map[string]any
			require.NoError(t, json.Unmarshal(data, &m))
			if _, ok := m["id"]; ok {
				return m
			}
		}
	}
	require.Equal(t, true, send("ping")["pong"], "ping is answered with pong")
	m := send(`{"jsonrpc":"2.0","id":0,"method":"nope","params":{}}`)
	require.EqualValues(t, -32601, m["error"].(map[string]any)["code"])
	m = send(`{"jsonrpc":"2.0","id":1,"method":"readFile","params":{"path":"/x","bogus":1}}`)
	require.EqualValues(t, -32602, m["error"].(map[string]any)["code"], "unknown params are invalid")
	m = send(`{"jsonrpc":"2.0","id":2,"method":"readFile","params":{"path":"/no/such"}}`)
	e := m["result"].(map[string]any)["error"].(map[string]any)
	require.Equal(t, "NotFound", e["constructorName"], "errors come as the result union's error")
	require.Equal(t, "ENOENT", e["code"])
	m = send(`{"jsonrpc":"2.0","id":3,"method":"exposeHttp","params":{"domain":"made-up.example","port":80}}`)
	require.Equal(t, "NotFound", m["result"].(map[string]any)["error"].(map[string]any)["constructorName"], "exposeHttp needs the REST step first")

	require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte("{not json")))
	_, _, err := ws.ReadMessage()
	var ce *websocket.CloseError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 4000, ce.Code, "invalid JSON closes the socket with 4000")
}

func TestBootFromSnapshotHidesFiles(t *testing.T) {
	f := newFake(t, nil)
	require.Equal(t, http.StatusOK, mkVolume(t, f, "vv", "base").status)
	ws, id, _ := boot(t, f, config(f, nil, "vv", nil))
	// Write a file through the socket, kill, snapshot.
	msg := `{"jsonrpc":"2.0","id":0,"method":"writeFile","params":{"path":"/workspace/kept","content":"aGk="}}`
	require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(msg)))
	_, data, err := ws.ReadMessage()
	require.NoError(t, err)
	require.Contains(t, string(data), `"ok"`)
	kill(t, f, id)
	require.Equal(t, http.StatusOK, call(t, f, denofake.Token, http.MethodPost, "/api/v2/volumes/vv/snapshot", map[string]string{"slug": "snap"}).status)
	require.Eventually(t, func() bool { return mkVolume(t, f, "from-snap", "snap").status == http.StatusOK }, 10*time.Second, 10*time.Millisecond)

	read := func(ws *websocket.Conn) string {
		require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":0,"method":"readFile","params":{"path":"/workspace/kept"}}`)))
		_, data, err := ws.ReadMessage()
		require.NoError(t, err)
		return string(data)
	}
	viaVolume, _, _ := boot(t, f, config(f, nil, "from-snap", nil))
	require.Contains(t, read(viaVolume), `"ok":"aGk="`, "a volume made from the snapshot has the file")
	viaSnapshot, _, _ := boot(t, f, config(f, nil, "snap", nil))
	require.Contains(t, read(viaSnapshot), "NotFound", "booting straight from the snapshot hides it (seed 001)")
}

func TestFaults(t *testing.T) {
	f := newFake(t, nil)
	f.Inject(denofake.Fault{Op: denofake.OpCreateVolume, Status: http.StatusServiceUnavailable, Times: 2})
	require.Equal(t, http.StatusServiceUnavailable, mkVolume(t, f, "flt", "base").status)
	require.Equal(t, http.StatusServiceUnavailable, mkVolume(t, f, "flt", "base").status)
	require.Equal(t, http.StatusOK, mkVolume(t, f, "flt", "base").status, "the fault applied twice, then the call goes through")
	require.Equal(t, 3, f.Calls(denofake.OpCreateVolume))
}

// TestStdinEndedBeforeSpawnIsKept: a client stream may start, carry its bytes and end before the spawn
// that refers to it is handled (the client sends stream.start first, then the spawn, and pumps the
// bytes at once; a short stdin is over in one enqueue). Deno holds such a stream until a request
// claims it (cloud-apis.md §2.5); the fake dropped it at its end, refusing the spawn with "stream 0
// was not started, or is already used", which failed every short stdin at random.
func TestStdinEndedBeforeSpawnIsKept(t *testing.T) {
	f := newFake(t, nil)
	require.Equal(t, http.StatusOK, mkVolume(t, f, "stdin", "base").status)
	ws, _, _ := boot(t, f, config(f, nil, "stdin", nil))
	for _, m := range []string{
		`{"jsonrpc":"2.0","method":"$sandbox.stream.start","params":{"streamId":0}}`,
		`{"jsonrpc":"2.0","method":"$sandbox.stream.enqueue","params":{"streamId":0,"data":"` + base64.StdEncoding.EncodeToString([]byte("start\n")) + `"}}`,
		`{"jsonrpc":"2.0","method":"$sandbox.stream.end","params":{"streamId":0}}`,
		`{"jsonrpc":"2.0","id":1,"method":"spawn","params":{"command":"cat","stdinStreamId":0,"stdout":"piped","stderr":"null"}}`,
	} {
		require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(m)))
	}
	out := map[float64]string{} // server stream id → bytes, buffered before the spawn's answer names it
	ended := map[float64]bool{}
	var stdout *float64
	for stdout == nil || !ended[*stdout] {
		_, data, err := ws.ReadMessage()
		require.NoError(t, err)
		var m struct {
			ID     *int `json:"id"`
			Method string
			Params struct {
				StreamID float64 `json:"streamId"`
				Data     string
			}
			Result struct{ OK map[string]any }
			Error  any
		}
		require.NoError(t, json.Unmarshal(data, &m), "%s", data)
		switch {
		case m.ID != nil:
			require.Nil(t, m.Error, "the spawn is answered: %s", data)
			id, ok := m.Result.OK["stdoutStreamId"].(float64)
			require.True(t, ok, "%s", data)
			stdout = &id
		case m.Method == "$sandbox.stream.enqueue":
			b, err := base64.StdEncoding.DecodeString(m.Params.Data)
			require.NoError(t, err)
			out[m.Params.StreamID] += string(b)
		case m.Method == "$sandbox.stream.end":
			ended[m.Params.StreamID] = true
		}
	}
	require.Equal(t, "start\n", out[*stdout], "the command read the stream's bytes, then its end")
}
