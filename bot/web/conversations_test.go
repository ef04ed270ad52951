package web

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
)

// TestConversationsInMemoryAreBounded: every well-formed id a client names (a stream opened, a
// conversation created) is registered; past maxConversations the least recently active ones without
// an open stream are forgotten (their turns are still in the database), so a client cannot grow the
// process's memory without end.
func TestConversationsInMemoryAreBounded(t *testing.T) {
	srv, err := New(Options{Handler: nopHandler{}, Directory: bot.NewDirectory(newStore(t)), TrustLoopback: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	_, watched, ok := srv.lookup("watched", true).subscribe(0)
	require.True(t, ok)
	old := srv.lookup("old", true)
	for range 5 {
		old.publish(Event{Type: EventPost, ReplyTo: "m", Text: "x"})
	}
	for range maxConversations + 500 {
		rec := serve(srv, loopbackReq("POST", "/api/conversations", nil))
		require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	}
	srv.mu.Lock()
	n := len(srv.convs)
	_, kept := srv.convs["watched"]
	srv.mu.Unlock()
	require.LessOrEqual(t, n, maxConversations)
	require.True(t, kept, "a conversation with an open stream is never forgotten")
	again := srv.lookup("old", true)
	require.NotSame(t, old, again, "the idle conversation was forgotten")
	_, _, ok = again.subscribe(3)
	require.False(t, ok, "a stream resuming from a forgotten copy is reset, not resumed in the new one")
	again.publish(Event{Type: EventPost, ReplyTo: "m", Text: "y"})
	backlog, ch, ok := again.subscribe(5)
	require.True(t, ok, "a stream that saw all of the forgotten copy resumes with what came after")
	require.Len(t, backlog, 1)
	again.unsubscribe(ch)
	select {
	case _, open := <-watched:
		require.True(t, open, "the open stream was not dropped")
	default:
	}
}

// TestForgettingTakesBoundedWork: registering a conversation when maxConversations are held
// forgets one after looking at a bounded number of them from the least recently used end. It used
// to look at every one, locking each, while holding the lock every request takes: 10,000 lock
// rounds per new conversation once full, and stuck behind any conversation whose lock was busy.
func TestForgettingTakesBoundedWork(t *testing.T) {
	srv, err := New(Options{Handler: nopHandler{}, Directory: bot.NewDirectory(newStore(t)), TrustLoopback: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	for i := range maxConversations {
		srv.lookup(fmt.Sprintf("c%d", i), true)
	}
	srv.lookup("c0", false) // used again: no longer the least recently used
	// Held elsewhere (a publish, a snapshot): forgetting must not need it.
	recent := srv.lookup(fmt.Sprintf("c%d", maxConversations-1), false)
	recent.mu.Lock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.lookup("new", true)
	}()
	deadlock := time.NewTimer(10 * time.Second) // a guard against a hang, not a timing assertion
	defer deadlock.Stop()
	select {
	case <-done:
	case <-deadlock.C:
		recent.mu.Unlock()
		<-done
		t.Fatal("registering a conversation waited on the lock of a recently used one")
	}
	recent.mu.Unlock()
	require.Nil(t, srv.lookup("c1", false), "the least recently used conversation is forgotten")
	require.NotNil(t, srv.lookup("c0", false))
	require.NotNil(t, srv.lookup("new", false))
}
