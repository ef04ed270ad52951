package main

import (
	"context"
	"net"
	"net/http"
)

// mountChat mounts the chat adapters on mux and returns a function that stops them.
func (m *Main) mountChat(ctx context.Context, mux *http.ServeMux, a *app, addr net.Addr) (func(), error) {
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		msg := "Threadbox is running. The web chat is not in this build yet.\n"
		if a.warning != "" {
			msg = "WARNING: " + a.warning + "\n\n" + msg
		}
		_, _ = w.Write([]byte(msg))
	})
	return func() {}, nil
}
