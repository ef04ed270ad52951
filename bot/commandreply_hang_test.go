package bot

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

// hangingStore is a database that hangs rather than refuses (a partition, a pool with no free
// connection): a command's record waits for its context. Nothing else of it may be used.
type hangingStore struct{ db.Store }

func (hangingStore) CommandInsert(ctx context.Context, _ db.NewCommand) (db.Command, error) {
	<-ctx.Done()
	return db.Command{}, ctx.Err()
}

// TestCommandAnsweredWhileDatabaseHangs: stop is what users reach for in an outage, and a command
// whose record cannot be written still runs; a database that hangs must not hold Handle (and so the
// platform's ack) and the reply for as long as the adapter's context lives, which may be for ever.
func TestCommandAnsweredWhileDatabaseHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &privatePosts{}
		h := NewHandler(HandlerConfig{}, &instanceTurns{id: "p1"}, hangingStore{}, nil, nil)
		ctx, cancel := context.WithCancel(context.Background()) // an adapter's context: no deadline
		defer cancel()
		returned := make(chan error, 1)
		go func() { returned <- h.Handle(ctx, cmdMsg("stop", "e1"), r) }()
		select { // the bubble's clock: an hour passes only when everything else is waiting
		case err := <-returned:
			require.NoError(t, err)
		case <-time.After(time.Hour):
			cancel() // let the goroutine end, so the bubble can
			<-returned
			t.Fatal("Handle waits on the hanging database with no bound")
		}
		require.NoError(t, h.Wait(t.Context()))
		require.Equal(t, []string{"Stopping the running turn."}, r.all())
	})
}
