//go:build linux

package db_test

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

// fullAfterCloseProxy forwards connections to PostgreSQL until every client connection it forwarded
// has been closed by its client; then it answers the next `refuse` connections as a full server
// does (SQLSTATE 53300), as when another replica's on-demand pool takes the slots a short replica has
// just freed, and forwards again after those. (A client that closes a socket before it opens the
// next one has its FIN delivered first on loopback: the old socket is past ESTABLISHED by the time
// the new one's startup message has been read.)
type fullAfterCloseProxy struct {
	ln     net.Listener
	target string

	mu           sync.Mutex
	live         map[*net.TCPConn]struct{}
	seen         int
	refuse       int
	refusedCount int
	flipped      bool
}

func newFullAfterCloseProxy(t *testing.T, target string, refuse int) *fullAfterCloseProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &fullAfterCloseProxy{ln: ln, target: target, refuse: refuse, live: map[*net.TCPConn]struct{}{}}
	t.Cleanup(func() { _ = ln.Close() })
	go p.serve()
	return p
}

func (p *fullAfterCloseProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c.(*net.TCPConn))
	}
}

func (p *fullAfterCloseProxy) handle(c *net.TCPConn) {
	startup, ok := readStartup(c)
	if !ok {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if !p.flipped && p.seen > 0 {
		open := 0
		for o := range p.live {
			if established(o) {
				open++
			}
		}
		p.flipped = open == 0
	}
	if p.flipped && p.refusedCount < p.refuse {
		p.refusedCount++
		p.mu.Unlock()
		refuseFull(c)
		return
	}
	p.seen++
	p.live[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.live, c)
		p.mu.Unlock()
	}()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	if _, err := s.Write(startup); err != nil {
		_ = c.Close()
		_ = s.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = s.Close()
	<-done
}

// established reports whether the client has not closed its side of c (TCP_INFO's state).
func established(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var state byte
	_ = rc.Control(func(fd uintptr) {
		var info [8]byte
		l := uint32(len(info))
		_, _, e := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.IPPROTO_TCP, syscall.TCP_INFO,
			uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&l)), 0)
		if e == 0 {
			state = info[0]
		}
	})
	return state == 1 // TCP_ESTABLISHED
}

// readStartup reads a client's startup message, answering SSL and GSS encryption requests with no.
func readStartup(c net.Conn) ([]byte, bool) {
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return nil, false
		}
		n := binary.BigEndian.Uint32(hdr[:4])
		if n < 8 || n > 1<<16 {
			return nil, false
		}
		msg := make([]byte, n)
		copy(msg, hdr[:])
		if _, err := io.ReadFull(c, msg[8:]); err != nil {
			return nil, false
		}
		if code := binary.BigEndian.Uint32(hdr[4:]); code == 80877103 || code == 80877104 {
			if _, err := c.Write([]byte("N")); err != nil {
				return nil, false
			}
			continue
		}
		return msg, true
	}
}

// refuseFull answers a startup message with PostgreSQL's "too many clients" error.
func refuseFull(c net.Conn) {
	defer c.Close()
	body := []byte("SFATAL\x00VFATAL\x00C53300\x00Msorry, too many clients already\x00\x00")
	msg := []byte{'E', 0, 0, 0, 0}
	binary.BigEndian.PutUint32(msg[1:], uint32(4+len(body)))
	_, _ = c.Write(append(msg, body...))
}

// TestPostgresWarmPoolsShortReopenWhileServerFull (from a review of ecbb658): a replica short of
// connections closes its fixed-size pools and opens on-demand ones; the slots it frees may be taken
// at once by another client (another replica's on-demand pool) before its own reopen connects. The
// reopen waits out a refusal for too many connections as the first open does (ping, up to
// warmWait), so the replica starts. Here the server refuses one connection, right after the short
// replica closed its first pools.
func TestPostgresWarmPoolsShortReopenWhileServerFull(t *testing.T) {
	defer db.SetWarmWait(time.Second)()
	u, _, _ := limitedRole(t, 3)
	proxy := newFullAfterCloseProxy(t, u.Host, 1)
	u.Host = proxy.ln.Addr().String()

	var opened, wanted int
	st, err := db.Open(pgCtx(t), u.String(), db.WithLockConns(4), db.WithWarmPools(func(o, w int) { opened, wanted = o, w }))
	require.NoError(t, err, "a replica short of connections starts, even if the server is full for a moment at its reopen")
	t.Cleanup(func() { _ = st.Close() })
	require.Less(t, opened, wanted)
	proxy.mu.Lock()
	require.Equal(t, 1, proxy.refusedCount, "the reopen met a full server")
	proxy.mu.Unlock()
}
