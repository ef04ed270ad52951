package docker

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
)

// These tests need no daemon.

func TestWrapErr(t *testing.T) {
	cli, err := client.NewClientWithOpts(client.WithHost("unix:///nonexistent/docker.sock"), client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	defer cli.Close()
	_, connErr := cli.ContainerInspect(t.Context(), "x")
	require.Error(t, connErr)

	for _, tc := range []struct {
		name string
		err  error
		want []error
	}{
		{"daemon unreachable", connErr, []error{sandbox.ErrUnavailable, sandbox.ErrNoEffect}},
		{"connection reset mid-request", fmt.Errorf("read: %w", syscall.ECONNRESET), []error{sandbox.ErrUnavailable}},
		{"connection refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), []error{sandbox.ErrUnavailable}},
		{"daemon says unavailable", fmt.Errorf("shutting down: %w", cerrdefs.ErrUnavailable), []error{sandbox.ErrUnavailable}},
		{"stream cut", fmt.Errorf("read body: %w", io.ErrUnexpectedEOF), []error{sandbox.ErrUnavailable}},
		{"not found", fmt.Errorf("No such container: x: %w", cerrdefs.ErrNotFound), []error{sandbox.ErrNotFound}},
		{"not running", fmt.Errorf("Container x is not running: %w", cerrdefs.ErrConflict), []error{sandbox.ErrNotRunning}},
		{"paused", fmt.Errorf("Container x is paused, unpause the container before exec: %w", cerrdefs.ErrConflict), []error{sandbox.ErrNotRunning}},
		{"removal in progress", fmt.Errorf("removal of container x is already in progress: %w", cerrdefs.ErrConflict), []error{sandbox.ErrNotFound}},
		{"marked for removal", fmt.Errorf("container is marked for removal and cannot be started: %w", cerrdefs.ErrConflict), []error{sandbox.ErrNotFound}},
		{"invalid", fmt.Errorf("bad: %w", cerrdefs.ErrInvalidArgument), []error{sandbox.ErrInvalidSpec}},
		{"canceled", fmt.Errorf("request: %w", context.Canceled), []error{context.Canceled}},
		{"deadline", fmt.Errorf("request: %w", context.DeadlineExceeded), []error{context.DeadlineExceeded}},
		{"other conflict", fmt.Errorf("name in use: %w", cerrdefs.ErrConflict), nil},
		{"other", errors.New("boom"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := wrapErr("op", tc.err)
			require.ErrorContains(t, got, tc.err.Error(), "the daemon's message is kept")
			for _, s := range []error{sandbox.ErrUnavailable, sandbox.ErrNoEffect, sandbox.ErrNotFound, sandbox.ErrNotRunning,
				sandbox.ErrInvalidSpec, context.Canceled, context.DeadlineExceeded} {
				require.Equal(t, slices.Contains(tc.want, s), errors.Is(got, s), "errors.Is(%v, %v)", got, s)
			}
			require.False(t, cerrdefs.IsNotFound(got) || cerrdefs.IsConflict(got), "docker error types do not escape")
		})
	}
	require.NoError(t, wrapErr("op", nil))
}

// A daemon that goes away after the request was sent (here: a socket that accepts and hangs up) is
// unavailable, but may have acted: no ErrNoEffect, so a Create is not retried blindly.
func TestWrapErrConnectionCutAfterSend(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Read(make([]byte, 512)) // the request arrived
			_ = c.Close()
		}
	}()
	cli, err := client.NewClientWithOpts(client.WithHost("unix://"+sock), client.WithVersion("1.45"))
	require.NoError(t, err)
	defer cli.Close()
	_, cutErr := cli.ContainerInspect(t.Context(), "x")
	require.Error(t, cutErr)
	got := wrapErr("inspect x", cutErr)
	require.ErrorIs(t, got, sandbox.ErrUnavailable)
	require.NotErrorIs(t, got, sandbox.ErrNoEffect)

	require.NoError(t, ln.Close())
	_, refused := cli.ContainerInspect(t.Context(), "x")
	got = wrapErr("inspect x", refused)
	require.ErrorIs(t, got, sandbox.ErrUnavailable)
	require.ErrorIs(t, got, sandbox.ErrNoEffect, "nothing listens: the request was never sent")
}

// With the daemon gone before the first request, Create surely did nothing: safe to retry.
func TestCreateDaemonUnreachable(t *testing.T) {
	cli, err := client.NewClientWithOpts(client.WithHost("unix:///nonexistent/docker.sock"), client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	defer cli.Close()
	p := &Provider{cli: cli, log: zap.NewNop(), stopTimeout: time.Second, cpu: cpuSamples{last: map[string]cpuSample{}}}
	_, err = p.Create(t.Context(), sandbox.Spec{Image: "img", Labels: sandbox.Labels{Deployment: "d", Thread: "t"}})
	require.ErrorIs(t, err, sandbox.ErrNoEffect)
	require.ErrorIs(t, err, sandbox.ErrUnavailable, "the daemon is down: the user is told to wait, not that the sandbox broke")
	_, err = p.Create(t.Context(), sandbox.Spec{Image: "img", User: "root", Labels: sandbox.Labels{Deployment: "d", Thread: "t"}})
	require.ErrorIs(t, err, sandbox.ErrInvalidSpec)
	require.ErrorIs(t, err, sandbox.ErrNoEffect)
}

func TestBoundedWriter(t *testing.T) {
	for _, tc := range []struct {
		name      string
		limit     int64
		writes    []string
		want      string
		truncated bool
	}{
		{"under", 10, []string{"abc", "def"}, "abcdef", false},
		{"exact", 6, []string{"abc", "def"}, "abcdef", false},
		{"split", 4, []string{"abc", "def"}, "abcd", true},
		{"after", 3, []string{"abc", "def", "ghi"}, "abc", true},
		{"zero", 0, []string{"abc"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sb strings.Builder
			w := &boundedWriter{w: &sb, left: tc.limit}
			for _, s := range tc.writes {
				n, err := w.Write([]byte(s))
				require.NoError(t, err, "never fails: the stream must keep draining")
				require.Equal(t, len(s), n)
			}
			require.Equal(t, tc.want, sb.String())
			require.Equal(t, tc.truncated, w.truncated)
		})
	}
	w := &boundedWriter{w: failWriter{}, left: 10}
	n, err := w.Write([]byte("abc"))
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Error(t, w.err, "a failing destination is remembered")
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("closed") }

// frame renders one frame of Docker's multiplexed stream.
func frame(stream byte, s string) []byte {
	b := make([]byte, 8+len(s))
	b[0] = stream
	binary.BigEndian.PutUint32(b[4:], uint32(len(s)))
	copy(b[8:], s)
	return b
}

func TestExecConnDemux(t *testing.T) {
	for _, tc := range []struct {
		name    string
		frames  [][]byte
		want    string
		wantErr string
	}{
		{"stdout only", [][]byte{frame(1, "hel"), frame(1, "lo")}, "hello", ""},
		{"stderr interleaved", [][]byte{frame(1, "hel"), frame(2, "warning"), frame(1, "lo")}, "hello", ""},
		{"refused", [][]byte{frame(2, "nc: can't connect to remote host (127.0.0.1): Connection refused\n")}, "", "Connection refused"},
		{"empty frames", [][]byte{frame(1, ""), frame(1, "x")}, "x", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			go func() {
				// One byte at a time: headers and payloads arrive split.
				for _, f := range tc.frames {
					for i := range f {
						if _, err := server.Write(f[i : i+1]); err != nil {
							return
						}
					}
				}
				_ = server.Close()
			}()
			c := &execConn{conn: client, r: bufio.NewReader(client), kill: func() {}, addr: "c:1"}
			got, err := io.ReadAll(c)
			require.Equal(t, tc.want, string(got))
			if tc.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tc.wantErr)
			}
			require.NoError(t, c.Close())
			require.NoError(t, c.Close(), "Close is idempotent")
		})
	}
}

// A read deadline that fires in the middle of a stderr frame must leave the stream in step: the
// next Read resumes that frame instead of taking its remaining bytes for a header.
func TestExecConnDeadlineInStderrFrame(t *testing.T) {
	client, server := net.Pipe()
	rest := make(chan struct{})
	go func() {
		// One write, so one buffered read takes it all: the stdout frame, then a stderr frame cut
		// after "war".
		first := append(frame(1, "hel"), frame(2, "warning")[:8+3]...)
		if _, err := server.Write(first); err != nil {
			return
		}
		<-rest
		_, _ = server.Write(append([]byte("ning"), frame(1, "lo")...))
		_ = server.Close()
	}()
	c := &execConn{conn: client, r: bufio.NewReader(client), kill: func() {}, addr: "c:1"}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "hel", string(buf[:n]))

	require.NoError(t, c.SetReadDeadline(time.Unix(1, 0)))
	_, err = c.Read(buf)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NoError(t, c.SetReadDeadline(time.Time{}))
	close(rest)

	got, err := io.ReadAll(c)
	require.NoError(t, err)
	require.Equal(t, "lo", string(got))
	require.Equal(t, "warning", string(c.stderr))
	require.NoError(t, c.Close())
}

func TestResolve(t *testing.T) {
	rw := handleState{WorkDir: "/workspace"}
	ro := handleState{WorkDir: "/workspace", ReadOnlyRoot: true}
	roTmpWork := handleState{WorkDir: "/tmp/work", ReadOnlyRoot: true}
	for _, tc := range []struct {
		st      handleState
		in      string
		want    string
		wantErr error
	}{
		{rw, "a.txt", "/workspace/a.txt", nil},
		{rw, "", "/workspace", nil},
		{rw, "./x/../y", "/workspace/y", nil},
		{rw, "/etc/passwd", "/etc/passwd", nil},
		{rw, "../etc/passwd", "/etc/passwd", nil},
		{rw, "/tmp/x", "/tmp/x", nil},
		{rw, "/", "", sandbox.ErrInvalidSpec},
		{ro, "/tmp/x", "", sandbox.ErrUnsupported},
		{ro, "/tmpfoo", "/tmpfoo", nil},
		{roTmpWork, "f", "/tmp/work/f", nil},
	} {
		got, err := tc.st.resolve(tc.in)
		if tc.wantErr != nil {
			require.ErrorIs(t, err, tc.wantErr, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

func TestContainerName(t *testing.T) {
	n := containerName("prod/eu 1")
	require.Regexp(t, `^threadbox-prod-eu-1-[a-z2-7]{10}$`, n)
	require.NotEqual(t, n, containerName("prod/eu 1"), "random suffix")
	require.LessOrEqual(t, len(containerName(strings.Repeat("x", 200))), 64)
}

func TestNameSafe(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{name: "kept as is", in: "prod_eu.1-a", want: "prod_eu.1-a"},
		{name: "others become dashes", in: "prod/eu 1", want: "prod-eu-1"},
		{name: "non-ASCII is one dash a rune", in: "café", want: "caf-"},
		{name: "cut at 40", in: strings.Repeat("x", 200), want: strings.Repeat("x", 40)},
		{name: "empty", in: "", want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, nameSafe(tc.in))
		})
	}
	require.Equal(t, "threadbox-prod-eu-1-full", NetworkName("prod/eu 1"))
}

func TestDecodeHandle(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    sandbox.Handle
		want error
	}{
		{"other provider", sandbox.Handle{Provider: "deno", ID: "x"}, sandbox.ErrInvalidSpec},
		{"empty", sandbox.Handle{Provider: "docker"}, sandbox.ErrNotFound},
		{"newer", sandbox.Handle{Provider: "docker", ID: "x", Version: 99}, sandbox.ErrInvalidSpec},
		{"bad state", sandbox.Handle{Provider: "docker", ID: "x", State: []byte(`[`)}, sandbox.ErrInvalidSpec},
		{"bare", sandbox.Handle{ID: "x"}, nil},
	} {
		_, err := decodeHandle(tc.h)
		if tc.want == nil {
			require.NoError(t, err, tc.name)
		} else {
			require.ErrorIs(t, err, tc.want, tc.name)
		}
	}
	st := handleState{Volume: "v", User: "agent", UID: 1000, GID: 1000, WorkDir: "/w", ReadOnlyRoot: true}
	back, err := decodeHandle(newHandle("id", st))
	require.NoError(t, err)
	require.Equal(t, st, back)
}

func TestMapping(t *testing.T) {
	for in, want := range map[string]sandbox.State{
		"running": sandbox.StateRunning, "created": sandbox.StateStopped, "exited": sandbox.StateStopped,
		"paused": sandbox.StateStopped, "restarting": sandbox.StateStarting, "dead": sandbox.StateFailed,
		"removing": sandbox.StateFailed,
	} {
		require.Equal(t, want, mapState(in), in)
	}
	require.Equal(t, 50.0, cpuPercent(cpuSample{total: 0, system: 1000}, cpuSample{total: 250, system: 2000}, 2))
	require.Zero(t, cpuPercent(cpuSample{}, cpuSample{total: 250, system: 2000}, 2), "no previous sample")
	u, g, ok := numericUser("1000:1001")
	require.True(t, ok)
	require.Equal(t, [2]int{1000, 1001}, [2]int{u, g})
	_, _, ok = numericUser("agent:1000")
	require.False(t, ok)
	require.Len(t, etcEntries([]byte("# c\nroot:x:0:0::/:/bin/sh\n\nagent:x:1000:1000::/w:/bin/sh\nbroken\n"), 4), 2)
}

// An image's VOLUMEs give the container anonymous volumes beside the work volume, listed in no fixed
// order: the work volume is found by its name, whatever the order.
func TestWorkVolume(t *testing.T) {
	work := container.MountPoint{Type: mount.TypeVolume, Name: "threadbox-d-abc-work", Destination: "/workspace"}
	anon := container.MountPoint{Type: mount.TypeVolume, Name: "0f3c9a7e5b", Destination: "/data"}
	bind := container.MountPoint{Type: mount.TypeBind, Source: "/run/gw", Destination: "/run/gw"}
	require.Equal(t, work.Name, workVolume([]container.MountPoint{anon, bind, work}))
	require.Equal(t, work.Name, workVolume([]container.MountPoint{work, anon}))
	require.Empty(t, workVolume([]container.MountPoint{anon, bind}), "no work volume: nothing of ours to remove")
}
