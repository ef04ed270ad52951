package forward

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
)

// afterDial is a test hook: it runs between a connection's dial and its registration.
var afterDial = func() {}

// Relay accepts connections on ln and copies each, byte for byte, to and from a new connection to
// the unix socket (the egress proxy, which speaks HTTP proxy itself), until ctx ends. It closes ln.
func Relay(ctx context.Context, ln net.Listener, socket string) error {
	var wg sync.WaitGroup
	var mu sync.Mutex // protects conns
	conns := map[net.Conn]struct{}{}
	stop := context.AfterFunc(ctx, func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	})
	defer stop()
	defer wg.Wait()
	var d net.Dialer
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("forward: egress: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			up, err := d.DialContext(ctx, "unix", socket)
			if err != nil {
				// The client sees its proxy connection close; say why in the answer it may print.
				_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"+
					"threadbox forwarder: the egress proxy is not reachable: "+err.Error()+"\n")
				_ = c.Close()
				return
			}
			afterDial()
			mu.Lock()
			conns[c], conns[up] = struct{}{}, struct{}{}
			// Cancelled between the dial and here: the stop above has run (or runs after this
			// unlock and closes them); either way nobody else closes this pair, and Relay would
			// wait on it for as long as both ends stay quiet.
			if ctx.Err() != nil {
				_, _ = c.Close(), up.Close()
			}
			mu.Unlock()
			pipe(c, up)
			mu.Lock()
			delete(conns, c)
			delete(conns, up)
			mu.Unlock()
		}()
	}
}

// pipe copies both ways, half-closing each side as its source ends, then closes both.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
	_ = a.Close()
	_ = b.Close()
}
