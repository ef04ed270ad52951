package docker

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/threadbox/threadbox/sandbox"
)

// dialScript pipes its stdio to 127.0.0.1:$1 inside the container with the first tool the image has:
// nc (busybox or netcat), socat, or bash's /dev/tcp. Everything travels over the Docker API, so it
// works with network none and with a remote engine.
const dialScript = `p=$1
if command -v nc >/dev/null 2>&1; then exec nc 127.0.0.1 "$p"; fi
if command -v socat >/dev/null 2>&1; then exec socat - "TCP:127.0.0.1:$p"; fi
if command -v bash >/dev/null 2>&1; then exec bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" || exit 1; cat <&3 & cat >&3; wait' "$p"; fi
echo "threadbox: the image has no nc, socat or bash to reach a port with" >&2; exit 127`

// Dial implements sandbox.Dialer. The returned conn is the exec's stdin (writes) and demultiplexed
// stdout (reads). If nothing listens on port, Dial still succeeds and the first Read fails with the
// tool's message: the exec cannot tell "connected" from "connecting". Close kills the tunnel's
// processes (the daemon does not, when the stream ends).
func (p *Provider) Dial(ctx context.Context, h sandbox.Handle, port int) (net.Conn, error) {
	st, err := decodeHandle(h)
	if err != nil {
		return nil, err
	}
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("dial port %d: %w", port, sandbox.ErrInvalidSpec)
	}
	marker := rand.Text()
	created, err := p.cli.ContainerExecCreate(ctx, h.ID, container.ExecOptions{
		User: st.User, Env: []string{markerEnv + "=" + marker},
		Cmd:         []string{"/bin/sh", "-c", dialScript, "sh", fmt.Sprint(port)},
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return nil, wrapErr(fmt.Sprintf("dial port %d in %s", port, h.ID), err)
	}
	kill := func() {
		_ = p.bestEffort(ctx, "kill dial", func(ctx context.Context) error { return p.killTagged(ctx, h.ID, st.User, marker) })
	}
	resp, err := p.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		kill()
		return nil, wrapErr(fmt.Sprintf("dial port %d in %s", port, h.ID), err)
	}
	return &execConn{
		conn: resp.Conn, r: resp.Reader, kill: kill,
		addr: execAddr(fmt.Sprintf("%s:%d", shortID(h.ID), port)),
	}, nil
}

// execConn is a net.Conn over a hijacked exec stream: writes go to stdin as they are, reads come from
// Docker's multiplexed output (8-byte frame headers: stream, 0, 0, 0, big-endian length), where stdout
// frames are the data and stderr frames are kept to explain a failed connection.
type execConn struct {
	conn net.Conn
	r    *bufio.Reader
	kill func()
	addr execAddr

	closeOnce sync.Once

	mu        sync.Mutex // protects the following (Read may be called concurrently with itself)
	hdr       [8]byte
	hdrN      int // bytes of hdr read so far: a deadline can interrupt a header half-way
	frameLeft int // stdout bytes left in the current frame
	errLeft   int // stderr bytes left in the current frame (a deadline can interrupt one too)
	gotData   bool
	stderr    []byte
}

var _ net.Conn = (*execConn)(nil)

func (c *execConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.frameLeft == 0 {
		if c.errLeft > 0 {
			if err := c.readStderr(); err != nil {
				return 0, err
			}
			continue
		}
		for c.hdrN < len(c.hdr) {
			n, err := c.r.Read(c.hdr[c.hdrN:])
			c.hdrN += n
			if err == io.EOF && c.hdrN == 0 && len(c.stderr) > 0 && !c.gotData {
				// The tunnel ended before any data: its stderr says why (connection refused).
				return 0, fmt.Errorf("dial %s: %s", c.addr, c.stderr)
			}
			if err != nil {
				return 0, err
			}
		}
		c.hdrN = 0
		size := int(binary.BigEndian.Uint32(c.hdr[4:]))
		if c.hdr[0] == 1 { // stdout
			c.frameLeft = size
			continue
		}
		c.errLeft = size // stderr (or anything else): read on the next turn of the loop
	}
	n, err := c.r.Read(b[:min(len(b), c.frameLeft)])
	c.frameLeft -= n
	c.gotData = c.gotData || n > 0
	if err == io.EOF && c.frameLeft > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// readStderr consumes the rest of the current stderr frame, keeping its first maxTunnelStderr bytes
// to explain a failed connection. It counts what it consumed, so that after a deadline the next Read
// resumes the frame rather than taking its remaining bytes for a header. c.mu is held.
func (c *execConn) readStderr() error {
	var buf [512]byte
	for c.errLeft > 0 {
		n, err := c.r.Read(buf[:min(len(buf), c.errLeft)])
		c.errLeft -= n
		if room := maxTunnelStderr - len(c.stderr); room > 0 {
			c.stderr = append(c.stderr, buf[:min(room, n)]...)
		}
		switch {
		case err == io.EOF && c.errLeft == 0:
			return nil // the frame is whole: the next header read reports the end
		case err == io.EOF:
			return io.ErrUnexpectedEOF
		case err != nil:
			return err
		}
	}
	return nil
}

// maxTunnelStderr bounds the tunnel's stderr kept for an error message.
const maxTunnelStderr = 1024

func (c *execConn) Write(b []byte) (int, error) { return c.conn.Write(b) }

// CloseWrite closes the sandbox side's input (the server sees EOF) and keeps reading.
func (c *execConn) CloseWrite() error {
	if cw, ok := c.conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close ends the stream and kills the tunnel's processes inside the container.
func (c *execConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		err = c.conn.Close()
		c.kill()
	})
	return err
}

func (c *execConn) LocalAddr() net.Addr                { return execAddr("docker-exec") }
func (c *execConn) RemoteAddr() net.Addr               { return c.addr }
func (c *execConn) SetDeadline(t time.Time) error      { return c.conn.SetDeadline(t) }
func (c *execConn) SetReadDeadline(t time.Time) error  { return c.conn.SetReadDeadline(t) }
func (c *execConn) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }

// execAddr names the far end of an exec tunnel: container:port.
type execAddr string

func (a execAddr) Network() string { return "docker-exec" }
func (a execAddr) String() string  { return string(a) }

func shortID(id string) string { return id[:min(12, len(id))] }
