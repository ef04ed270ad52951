// Command threadbox-forward is the in-sandbox side of the model gateway (package
// agentpool/gateway/forward). Build it static and point gateway.forwarder at it:
//
//	CGO_ENABLED=0 go build -o threadbox-forward ./cmd/threadbox-forward
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/threadbox/threadbox/agentpool/gateway/forward"
)

func main() {
	var o forward.Options
	flag.StringVar(&o.Listen, "listen", "127.0.0.1:18080", "address to serve inside the sandbox")
	flag.StringVar(&o.Socket, "socket", "/run/threadbox/gateway.sock", "the gateway's unix socket")
	flag.StringVar(&o.TokenFile, "token-file", "/run/threadbox/token", "file holding the sandbox token")
	flag.StringVar(&o.EgressListen, "egress-listen", "", "address to relay to the egress proxy (restricted egress)")
	flag.StringVar(&o.EgressSocket, "egress-socket", "", "the egress proxy's unix socket")
	flag.Parse()
	// SIGTERM is docker stop: exit 0 at once, so a stop is quick and not reported as a failure.
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	if err := forward.Run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
