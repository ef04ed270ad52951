package bot

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// instanceTurns is fakeTurns naming its process, as *agentpool.Pool does; doErr refuses Do.
type instanceTurns struct {
	fakeTurns
	id    string
	doErr error
	// hold, when set, keeps Do's jobs until closed; jobs tracks them.
	hold chan struct{}
	jobs sync.WaitGroup
}

func (f *instanceTurns) Instance() string { return f.id }

func (f *instanceTurns) Do(k string, fn func(context.Context), drop func(error)) error {
	if f.doErr != nil {
		return f.doErr
	}
	if f.hold != nil {
		f.jobs.Go(func() { <-f.hold; fn(context.Background()) })
		return nil
	}
	return f.fakeTurns.Do(k, fn, drop)
}

// privatePosts is posts with private replies, kept apart (user → texts); noPrivate refuses them.
type privatePosts struct {
	posts
	mu        sync.Mutex
	private   map[string][]string
	noPrivate bool
	fail      error
}

func (p *privatePosts) Post(ctx context.Context, s string) error {
	if p.fail != nil {
		return p.fail
	}
	return p.posts.Post(ctx, s)
}

func (p *privatePosts) PostPrivate(_ context.Context, user, s string) error {
	if p.noPrivate {
		return ErrNoPrivate
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.private == nil {
		p.private = map[string][]string{}
	}
	p.private[user] = append(p.private[user], s)
	return nil
}

func (p *privatePosts) privateTo(user string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.private[user]...)
}

// replyPlatform restores every delivery to one Replier.
type replyPlatform struct{ r Replier }

func (p replyPlatform) Name() string                                            { return "test" }
func (p replyPlatform) Restore(json.RawMessage) (Replier, error)                { return p.r, nil }
func (p replyPlatform) OpenFile(context.Context, string) (io.ReadCloser, error) { return nil, io.EOF }

func cmdMsg(text, event string) Message {
	return Message{Thread: ThreadKey{Platform: "test", Thread: "t1"}, ChannelID: "C1", User: User{ID: "U1"},
		Text: text, EventID: event, Reply: json.RawMessage(`{"c":"C1"}`)}
}

func openCommands(t *testing.T, st db.Store) []db.Command {
	t.Helper()
	open, err := st.CommandsOpen(t.Context(), 0, 0)
	require.NoError(t, err)
	return open
}

// TestCommandReplyRecordedUntilPosted: a command is recorded before Handle returns (the ack) and
// forgotten once its reply is posted; a redelivery of its event is not answered twice while
// recorded.
func TestCommandReplyRecordedUntilPosted(t *testing.T) {
	st := dbtest.OpenSQLite(t)
	hold := make(chan struct{})
	turns := &instanceTurns{id: "p1", hold: hold}
	h := NewHandler(HandlerConfig{}, turns, st, NewAdmin(st, &recordingOps{store: st}, []string{"test:U1"}, nil), nil)
	r := &privatePosts{}

	// An admin command waits on the thread's queue: recorded meanwhile, private, named without its
	// arguments.
	require.NoError(t, h.Handle(t.Context(), cmdMsg("admin inspect test:secret-thread", "e1"), r))
	open := openCommands(t, st)
	require.Len(t, open, 1)
	require.Equal(t, "admin inspect", open[0].Command)
	require.True(t, open[0].Private)
	require.Equal(t, "p1", open[0].Owner)
	require.Nil(t, open[0].Answer)

	// The same event again while the first is being answered: nothing more.
	require.NoError(t, h.Handle(t.Context(), cmdMsg("admin inspect test:secret-thread", "e1"), r))
	close(hold)
	turns.jobs.Wait()
	require.Len(t, r.privateTo("U1"), 1, "one answer")
	require.Empty(t, r.all(), "an admin reply never goes to the thread")
	require.Empty(t, openCommands(t, st), "forgotten once posted")

	require.NoError(t, h.Handle(t.Context(), cmdMsg("help", "e2"), r))
	require.NoError(t, h.Wait(t.Context()))
	require.Equal(t, []string{HelpText}, r.all())
	require.Empty(t, openCommands(t, st))
}

// TestCommandNotAcceptedForgotten: a command Handle refuses (the queue is closed) leaves no record,
// so the platform's redelivery is taken and answered.
func TestCommandNotAcceptedForgotten(t *testing.T) {
	st := dbtest.OpenSQLite(t)
	turns := &instanceTurns{id: "p1", doErr: errors.New("closing")}
	h := NewHandler(HandlerConfig{}, turns, st, NewAdmin(st, &recordingOps{store: st}, []string{"test:U1"}, nil), nil)
	err := h.Handle(t.Context(), cmdMsg("admin stats", "e1"), &privatePosts{})
	require.ErrorIs(t, err, ErrNotAccepted)
	require.Empty(t, openCommands(t, st))

	turns.doErr = nil
	r := &privatePosts{}
	require.NoError(t, h.Handle(t.Context(), cmdMsg("admin stats", "e1"), r))
	require.NoError(t, h.Wait(t.Context()))
	require.Len(t, r.privateTo("U1"), 1, "the redelivery is answered")
}

// TestRecoverCommands: the records a dead process left are answered by a live one, once: the
// recorded answer when there is one (privately for an admin's), or that the command was
// interrupted; a live process's records are left to it, and its own failed post is tried again.
func TestRecoverCommands(t *testing.T) {
	ctx := t.Context()
	st := dbtest.OpenSQLite(t)
	dl, err := encodeDelivery(cmdMsg("", ""))
	require.NoError(t, err)
	record := func(event, name, owner string, private bool, answer *string) db.Command {
		c, err := st.CommandInsert(ctx, db.NewCommand{PlatformEventID: event, ThreadKey: "test:t1", UserID: "U1",
			Command: name, Private: private, Delivery: dl, Owner: owner})
		require.NoError(t, err)
		if answer != nil {
			require.NoError(t, st.CommandAnswer(ctx, c.ID, *answer))
		}
		return c
	}
	done, secret := "Reset: this thread's sandbox is gone.", "sessions: 3"
	record("e1", "reset", "dead", false, nil)
	record("e2", "reset", "dead", false, &done)
	record("e3", "admin inspect", "dead", true, &secret)
	record("e4", "status", "alive", false, nil)
	record("e5", "help", "p2", false, &done) // this process's, its post failed

	r := &privatePosts{}
	h := NewHandler(HandlerConfig{}, &instanceTurns{id: "p2"}, st, nil, nil)
	h.RegisterPlatform(replyPlatform{r: r})
	isAlive := func(owner string) (bool, error) { return owner == "alive" || owner == "p2", nil }
	n, err := h.RecoverCommands(ctx, isAlive)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.Equal(t, []string{InterruptedCommandText("reset"), done, done}, r.all())
	require.Equal(t, []string{secret}, r.privateTo("U1"))
	open := openCommands(t, st)
	require.Len(t, open, 1)
	require.Equal(t, "alive", open[0].Owner, "a live process's command is its own to answer")

	n, err = h.RecoverCommands(ctx, isAlive)
	require.NoError(t, err)
	require.Zero(t, n, "answered once")

	// A secret answer never falls back to the thread; an interrupted note may.
	r2 := &privatePosts{noPrivate: true}
	h2 := NewHandler(HandlerConfig{}, &instanceTurns{id: "p3"}, st, nil, nil)
	h2.RegisterPlatform(replyPlatform{r: r2})
	record("e6", "admin inspect", "dead", true, &secret)
	record("e7", "admin drain", "dead", true, nil)
	_, err = h2.RecoverCommands(ctx, func(o string) (bool, error) { return o == "alive", nil })
	require.NoError(t, err)
	require.Equal(t, []string{NoPrivateAdminText, InterruptedCommandText("admin drain")}, r2.all())
}

// TestRecoverCommandsGivesUp: a reply that cannot be posted is tried a few times, then given up, so
// a deleted channel is not retried for ever.
func TestRecoverCommandsGivesUp(t *testing.T) {
	ctx := t.Context()
	st := dbtest.OpenSQLite(t)
	dl, err := encodeDelivery(cmdMsg("", ""))
	require.NoError(t, err)
	_, err = st.CommandInsert(ctx, db.NewCommand{PlatformEventID: "e1", ThreadKey: "test:t1", UserID: "U1",
		Command: "stop", Delivery: dl, Owner: "dead"})
	require.NoError(t, err)
	r := &privatePosts{fail: errors.New("channel_not_found")}
	h := NewHandler(HandlerConfig{}, &instanceTurns{id: "p1"}, st, nil, nil)
	h.RegisterPlatform(replyPlatform{r: r})
	dead := func(o string) (bool, error) { return o == "p1", nil }
	for i := 1; i <= maxCommandPosts; i++ {
		require.Len(t, openCommands(t, st), 1, "attempt %d", i)
		n, err := h.RecoverCommands(ctx, dead)
		require.NoError(t, err)
		require.Zero(t, n)
	}
	require.Empty(t, openCommands(t, st), "given up after %d attempts", maxCommandPosts)
}
