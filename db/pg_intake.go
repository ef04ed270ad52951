package db

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/threadbox/threadbox/db/internal/pgsqlc"
)

// Group commit of TurnInsert on PostgreSQL.
//
// Every message is recorded (TurnInsert) before the chat platform is acknowledged, so the insert is
// on the ack path of every event. One insert per round trip and per commit caps the intake at what
// one connection does serially, and with the query pool shared by running turns an ack also waited
// for a free connection behind them (at 2,000 Slack events/s: p99 in seconds). So inserts are taken
// by the intake instead: the callers that arrive while a batch commits wait together and go in the
// next batch, one statement (TurnInsertMany), one round trip, one commit, on connections of the
// intake's own that turns never use. Each caller returns only once its batch has committed, so
// durability is what it was: acknowledged means recorded.
type pgIntake struct {
	s *pgStore
	// db runs the batches: the intake's own pool (pgStore.intakePool).
	db pgsqlc.DBTX
	// flushers is how many batches may commit at once (one per intake connection).
	flushers int

	mu      sync.Mutex // protects the following
	waiting []*intakeReq
	running int // flusher goroutines
	// alone counts the turns being recorded on a connection of their own (TurnInsertHeld).
	alone int
}

// takeAlone reports whether a turn may be recorded on its own connection now, and if so counts it
// until doneAlone: only while nothing else is being recorded. One commit per turn is cheaper for a
// turn alone (its start shares the commit), dearer in a burst, where one commit serves hundreds.
func (in *pgIntake) takeAlone() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.waiting) > 0 || in.running > 0 || in.alone > 0 {
		return false
	}
	in.alone++
	return true
}

func (in *pgIntake) doneAlone() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.alone--
}

// intakeReq is one caller's turn, waiting for its batch.
type intakeReq struct {
	t   NewTurn
	now time.Time
	// taken is set (under pgIntake.mu) once a flusher holds the request: from then on the caller
	// waits for the outcome even if its context ends, since the row may commit.
	taken bool
	done  chan struct{}
	turn  Turn
	err   error
}

// Intake bounds.
const (
	// maxIntakeBatch caps the rows of one statement (its arrays are sent as parameters).
	maxIntakeBatch = 256
	// intakeTimeout bounds one batch's commit; its callers wait for it.
	intakeTimeout = 30 * time.Second
	// intakeConns is the intake's own connections, and so the batches committing at once: while one
	// commits, the next fills, and a second can go as soon as it has a row.
	intakeConns = 2
)

func newPGIntake(s *pgStore, db pgsqlc.DBTX, flushers int) *pgIntake {
	return &pgIntake{s: s, db: db, flushers: max(1, flushers)}
}

// insert records t in the next batch and returns once that batch has committed (or failed).
func (in *pgIntake) insert(ctx context.Context, t NewTurn) (Turn, error) {
	r := &intakeReq{t: t, now: in.s.clock(), done: make(chan struct{})}
	in.mu.Lock()
	in.waiting = append(in.waiting, r)
	start := in.running < in.flushers
	if start {
		in.running++
	}
	in.mu.Unlock()
	if start {
		go in.flush()
	}
	select {
	case <-r.done:
		return r.turn, r.err
	case <-ctx.Done():
	}
	in.mu.Lock()
	if !r.taken {
		// Not in a batch yet: withdraw it, nothing was written.
		for i, w := range in.waiting {
			if w == r {
				in.waiting = append(in.waiting[:i:i], in.waiting[i+1:]...)
				break
			}
		}
		in.mu.Unlock()
		return Turn{}, fmt.Errorf("db: insert turn for event %s: %w", t.PlatformEventID, ctx.Err())
	}
	in.mu.Unlock()
	// In a batch already: its commit decides, and the caller must know which way (a turn recorded
	// but reported as failed would never be queued by this process).
	<-r.done
	return r.turn, r.err
}

// flush commits batches until no caller waits.
func (in *pgIntake) flush() {
	for {
		in.mu.Lock()
		n := min(len(in.waiting), maxIntakeBatch)
		if n == 0 {
			in.running--
			in.mu.Unlock()
			return
		}
		batch := make([]*intakeReq, n)
		copy(batch, in.waiting)
		for _, r := range batch {
			r.taken = true
		}
		rest := copy(in.waiting, in.waiting[n:])
		clear(in.waiting[rest:])
		in.waiting = in.waiting[:rest]
		in.mu.Unlock()

		in.commit(batch)
		for _, r := range batch {
			close(r.done)
		}
	}
}

// commit writes one batch and sets each request's outcome. A statement that fails for a reason other
// than the connection or the deadline is retried row by row, so that one bad row fails alone.
func (in *pgIntake) commit(batch []*intakeReq) {
	ctx, cancel := context.WithTimeout(context.Background(), intakeTimeout)
	defer cancel()
	defer context.AfterFunc(in.s.closed, cancel)()
	if len(batch) == 1 {
		in.one(ctx, batch[0])
		return
	}
	// The first of two requests for one event is inserted; the second is its duplicate, as it
	// would be one statement later.
	first := make(map[string]*intakeReq, len(batch))
	var p pgsqlc.TurnInsertManyParams
	for _, r := range batch {
		if _, dup := first[r.t.PlatformEventID]; dup {
			r.err = duplicateTurn(r.t)
			continue
		}
		first[r.t.PlatformEventID] = r
		p.ThreadKeys = append(p.ThreadKeys, r.t.ThreadKey)
		p.PlatformEventIds = append(p.PlatformEventIds, r.t.PlatformEventID)
		p.UserIds = append(p.UserIds, r.t.UserID)
		p.Prompts = append(p.Prompts, r.t.Prompt)
		p.CreatedAts = append(p.CreatedAts, pgTime(r.now))
		p.Deliveries = append(p.Deliveries, r.t.Delivery)
		p.Owners = append(p.Owners, r.t.Owner)
	}
	rows, err := in.s.q.TurnInsertMany(ctx, in.db, p)
	if err != nil {
		if ctx.Err() != nil || in.s.closed.Err() != nil {
			for _, r := range first {
				r.err = pgErr("insert turn for event "+r.t.PlatformEventID, err)
			}
			return
		}
		for _, r := range first {
			in.one(ctx, r)
		}
		return
	}
	for _, row := range rows {
		if r := first[row.PlatformEventID]; r != nil {
			r.turn = fromPGTurn(row)
			delete(first, row.PlatformEventID)
		}
	}
	for _, r := range first {
		r.err = duplicateTurn(r.t) // skipped by ON CONFLICT: recorded before
	}
}

// one inserts a single request on its own.
func (in *pgIntake) one(ctx context.Context, r *intakeReq) {
	row, err := in.s.q.TurnInsert(ctx, in.db, pgsqlc.TurnInsertParams{
		ThreadKey:       r.t.ThreadKey,
		PlatformEventID: r.t.PlatformEventID,
		UserID:          r.t.UserID,
		Prompt:          r.t.Prompt,
		Now:             pgTime(r.now),
		Delivery:        r.t.Delivery,
		Owner:           r.t.Owner,
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		r.err = duplicateTurn(r.t)
	case err != nil:
		r.err = pgErr("insert turn for event "+r.t.PlatformEventID, err)
	default:
		r.turn = fromPGTurn(row)
	}
}

func duplicateTurn(t NewTurn) error {
	return fmt.Errorf("db: insert turn for event %s: %w", t.PlatformEventID, ErrDuplicate)
}
