package main

import (
	"context"
	"net"
	"net/http"

	"github.com/threadbox/threadbox/bot/web"
)

// mountChat mounts the chat adapters on mux (the web chat owns "/" and /api/; the more specific
// health and webhook routes win) and returns a function that stops them.
func (m *Main) mountChat(ctx context.Context, mux *http.ServeMux, a *app, addr net.Addr) (func(), error) {
	ws, err := web.New(web.Options{
		Handler: a.handler, Admin: a.admin, Store: a.store, Token: m.Config.HTTP.Token,
		Warning: a.warning, Logger: m.Logger,
	})
	if err != nil {
		return nil, err
	}
	mux.Handle("/", ws)
	return func() { _ = ws.Close() }, nil
}
