package dbtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

func newTurn(thread, event, prompt string) db.NewTurn {
	return db.NewTurn{ThreadKey: thread, PlatformEventID: event, UserID: "U1", Prompt: prompt}
}

// insertOwned records a turn of thread for event, taken by the process owner.
func insertOwned(ctx context.Context, t *testing.T, s db.Store, thread, event, owner string) db.Turn {
	t.Helper()
	nt := newTurn(thread, event, "p")
	nt.Owner = owner
	turn, err := s.TurnInsert(ctx, nt)
	require.NoError(t, err)
	return turn
}

func testTurnLifecycle(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)

	turn, err := s.TurnInsert(ctx, newTurn("k", "ev1", "hello"))
	require.NoError(t, err)
	require.NotZero(t, turn.ID)
	require.Equal(t, db.Turn{
		ID: turn.ID, ThreadKey: "k", PlatformEventID: "ev1", UserID: "U1", Prompt: "hello",
		Status: db.TurnQueued, CreatedAt: utcMicro(start),
	}, turn)

	got, err := s.TurnGet(ctx, turn.ID)
	require.NoError(t, err)
	require.Equal(t, turn, got)
	got, err = s.TurnGetByEvent(ctx, "ev1")
	require.NoError(t, err)
	require.Equal(t, turn, got)
	_, err = s.TurnGetByEvent(ctx, "ev-never-seen")
	require.ErrorIs(t, err, db.ErrNotFound)

	started := clock.Advance(time.Second)
	turn, err = s.TurnStart(ctx, turn.ID, "")
	require.NoError(t, err)
	require.Equal(t, db.TurnRunning, turn.Status)
	require.Equal(t, utcMicro(started), turn.StartedAt)
	require.Equal(t, utcMicro(started), turn.LastEventAt)

	event := clock.Advance(time.Second)
	require.NoError(t, s.TurnTouch(ctx, turn.ID))
	got, err = s.TurnGet(ctx, turn.ID)
	require.NoError(t, err)
	require.Equal(t, utcMicro(event), got.LastEventAt)

	finished := clock.Advance(time.Second)
	turn, err = s.TurnFinish(ctx, turn.ID, db.TurnResult{
		Status: db.TurnDone, Answer: "hi", Usage: []byte(`{"input_tokens": 3}`),
	})
	require.NoError(t, err)
	require.Equal(t, db.TurnDone, turn.Status)
	require.Equal(t, "hi", turn.Answer)
	require.JSONEq(t, `{"input_tokens":3}`, string(turn.Usage))
	require.Equal(t, utcMicro(finished), turn.FinishedAt)
	require.Equal(t, utcMicro(started), turn.StartedAt)

	// A queued turn may be cancelled without running.
	q, err := s.TurnInsert(ctx, newTurn("k", "ev2", "never mind"))
	require.NoError(t, err)
	q, err = s.TurnFinish(ctx, q.ID, db.TurnResult{Status: db.TurnCancelled, Error: "stopped by user"})
	require.NoError(t, err)
	require.Equal(t, db.TurnCancelled, q.Status)
	require.Equal(t, "stopped by user", q.Error)
	require.Nil(t, q.Usage)
	require.True(t, q.StartedAt.IsZero())

	_, err = s.TurnGet(ctx, 999999)
	require.ErrorIs(t, err, db.ErrNotFound)
	_, err = s.TurnInsert(ctx, newTurn("k", "", "x"))
	require.ErrorIs(t, err, db.ErrInvalid)
	_, err = s.TurnInsert(ctx, newTurn("", "ev9", "x"))
	require.ErrorIs(t, err, db.ErrInvalid)
}

func testTurnWrongState(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	turn, err := s.TurnInsert(ctx, newTurn("k", "ev1", "p"))
	require.NoError(t, err)

	err = s.TurnTouch(ctx, turn.ID)
	require.ErrorIs(t, err, db.ErrConflict, "a queued turn has no runtime events")

	_, err = s.TurnStart(ctx, turn.ID, "")
	require.NoError(t, err)
	_, err = s.TurnStart(ctx, turn.ID, "")
	var te *db.TransitionError
	require.True(t, errors.As(err, &te), "got %v", err)
	require.Equal(t, &db.TransitionError{
		Entity: "turn", Key: fmt.Sprint(turn.ID), From: []string{"queued"}, To: "running", Actual: "running",
	}, te)

	done, err := s.TurnFinish(ctx, turn.ID, db.TurnResult{Status: db.TurnDone, Answer: "a"})
	require.NoError(t, err)
	_, err = s.TurnFinish(ctx, turn.ID, db.TurnResult{Status: db.TurnFailed, Error: "late"})
	require.ErrorIs(t, err, db.ErrConflict)
	got, err := s.TurnGet(ctx, turn.ID)
	require.NoError(t, err)
	require.Equal(t, done, got, "a failed finish changes nothing")

	_, err = s.TurnFinish(ctx, turn.ID, db.TurnResult{Status: db.TurnRunning})
	require.ErrorIs(t, err, db.ErrInvalid)
	_, err = s.TurnStart(ctx, 424242, "")
	require.ErrorIs(t, err, db.ErrNotFound)
	_, err = s.TurnFinish(ctx, 424242, db.TurnResult{Status: db.TurnDone})
	require.ErrorIs(t, err, db.ErrNotFound)
	require.ErrorIs(t, s.TurnTouch(ctx, 424242), db.ErrNotFound)
}

// testTurnFinishFenced: a finish fenced to an owner leaves alone a turn another process claimed
// (ErrNotOwner, also an ErrConflict), and finishes its own; without an owner it is not fenced.
func testTurnFinishFenced(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	turn := insertOwned(ctx, t, s, "k", "ev1", "A")
	_, err := s.TurnClaim(ctx, turn.ID, "A", "B", db.TurnQueued) // B took A for dead
	require.NoError(t, err)
	running, err := s.TurnStart(ctx, turn.ID, "B")
	require.NoError(t, err)

	_, err = s.TurnFinish(ctx, turn.ID, db.TurnResult{Status: db.TurnFailed, Error: "lost", Owner: "A"})
	require.ErrorIs(t, err, db.ErrNotOwner)
	require.ErrorIs(t, err, db.ErrConflict)
	require.ErrorContains(t, err, "held by B (not A)")
	got, err := s.TurnGet(ctx, turn.ID)
	require.NoError(t, err)
	require.Equal(t, running, got, "the other process's turn is unchanged")

	done, err := s.TurnFinish(ctx, turn.ID, db.TurnResult{Status: db.TurnDone, Answer: "a", Owner: "B"})
	require.NoError(t, err)
	require.Equal(t, db.TurnDone, done.Status)
	_, err = s.TurnFinish(ctx, turn.ID, db.TurnResult{Status: db.TurnFailed, Owner: "B"})
	require.ErrorIs(t, err, db.ErrConflict, "finished already")
	require.NotErrorIs(t, err, db.ErrNotOwner, "its own, finished: a conflict, not another's")

	other, err := s.TurnInsert(ctx, newTurn("k", "ev2", "p"))
	require.NoError(t, err)
	_, err = s.TurnFinish(ctx, other.ID, db.TurnResult{Status: db.TurnFailed, Error: "stuck"})
	require.NoError(t, err, "no owner: not fenced (the leader's watchdog)")
}

func testTurnDedupe(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	first, err := s.TurnInsert(ctx, newTurn("k", "ev1", "first"))
	require.NoError(t, err)
	_, err = s.TurnInsert(ctx, newTurn("k", "ev1", "retry of first"))
	require.ErrorIs(t, err, db.ErrDuplicate)
	// The key is global: the same event id in another thread is still a duplicate.
	_, err = s.TurnInsert(ctx, newTurn("other", "ev1", "x"))
	require.ErrorIs(t, err, db.ErrDuplicate)

	got, err := s.TurnGet(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, "first", got.Prompt)
	requireTurnCount(t, s, "k", 1)
	requireTurnCount(t, s, "other", 0)
}

// testTurnDedupeConcurrent: the same event inserted from 10 goroutines at once gives one turn.
func testTurnDedupeConcurrent(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	const n = 10
	var (
		wg      sync.WaitGroup
		release = make(chan struct{})
		results = make(chan error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			_, err := s.TurnInsert(ctx, newTurn("k", "slack-retry-ev", fmt.Sprintf("attempt %d", i)))
			results <- err
		}()
	}
	close(release)
	wg.Wait()
	close(results)
	ok := 0
	for err := range results {
		if err == nil {
			ok++
			continue
		}
		require.ErrorIs(t, err, db.ErrDuplicate)
	}
	require.Equal(t, 1, ok)
	requireTurnCount(t, s, "k", 1)
}

// requireTurnCount counts a thread's turns: it finishes every queued one (scanning the small ids these
// tests create) and reads the transcript, which lists finished turns only.
func requireTurnCount(t *testing.T, s db.Store, thread string, want int) {
	t.Helper()
	ctx := testCtx(t)
	for i := int64(1); i <= 200; i++ { // ids are small here; Postgres skips some on conflicts
		turn, err := s.TurnGet(ctx, i)
		if errors.Is(err, db.ErrNotFound) {
			continue
		}
		require.NoError(t, err)
		if turn.ThreadKey == thread && turn.Status == db.TurnQueued {
			_, err = s.TurnFinish(ctx, turn.ID, db.TurnResult{Status: db.TurnDone})
			require.NoError(t, err)
		}
	}
	got, err := s.TurnTranscript(ctx, thread, db.TranscriptLimit{MaxTurns: 1000})
	require.NoError(t, err)
	require.Len(t, got, want)
}

func testTurnTranscriptCaps(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	// Six finished turns of 10 characters each (prompt + answer), one in another thread, and a queued
	// and a running one that are not history yet.
	add := func(thread, event, prompt, answer string, status db.TurnStatus) {
		turn, err := s.TurnInsert(ctx, newTurn(thread, event, prompt))
		require.NoError(t, err)
		if status == db.TurnQueued {
			return
		}
		_, err = s.TurnStart(ctx, turn.ID, "")
		require.NoError(t, err)
		if status != db.TurnRunning {
			_, err = s.TurnFinish(ctx, turn.ID, db.TurnResult{Status: status, Answer: answer})
			require.NoError(t, err)
		}
	}
	for i := range 6 {
		status := db.TurnDone
		if i == 4 {
			status = db.TurnFailed
		}
		add("k", fmt.Sprintf("ev%d", i), fmt.Sprintf("q%d...", i), fmt.Sprintf("a%d...", i), status)
	}
	add("other", "other-ev", "q-other", "a-other", db.TurnDone)
	add("k", "queued", "q-queued", "", db.TurnQueued)
	add("k", "running", "q-running", "", db.TurnRunning)

	prompts := func(turns []db.Turn) []string {
		out := make([]string, len(turns))
		for i, t := range turns {
			out[i] = t.Prompt
		}
		return out
	}
	tests := []struct {
		name  string
		limit db.TranscriptLimit
		want  []string
	}{
		{"defaults", db.TranscriptLimit{}, []string{"q0...", "q1...", "q2...", "q3...", "q4...", "q5..."}},
		{"turn cap keeps the newest", db.TranscriptLimit{MaxTurns: 2}, []string{"q4...", "q5..."}},
		{"char cap exact", db.TranscriptLimit{MaxChars: 30}, []string{"q3...", "q4...", "q5..."}},
		{"char cap never cuts a turn", db.TranscriptLimit{MaxChars: 29}, []string{"q4...", "q5..."}},
		{"both caps", db.TranscriptLimit{MaxTurns: 3, MaxChars: 1000}, []string{"q3...", "q4...", "q5..."}},
		{"a turn longer than half the cap is left out", db.TranscriptLimit{MaxChars: 19}, []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.TurnTranscript(ctx, "k", tc.limit)
			require.NoError(t, err)
			require.Equal(t, tc.want, prompts(got))
		})
	}

	// One long answer is left out, and the turns before it still come (it used to end the list: the
	// agent of a recreated sandbox started with no history at all).
	add("long", "l0", "q0...", "a0...", db.TurnDone)
	add("long", "l1", "q1...", "a1...", db.TurnDone)
	add("long", "l2", "fix", strings.Repeat("é", 50000), db.TurnDone)
	long, err := s.TurnTranscript(ctx, "long", db.TranscriptLimit{MaxChars: 100})
	require.NoError(t, err)
	require.Equal(t, []string{"q0...", "q1..."}, prompts(long))

	// AfterID (a reset point) leaves out that turn and older ones.
	all, err := s.TurnTranscript(ctx, "k", db.TranscriptLimit{})
	require.NoError(t, err)
	got, err := s.TurnTranscript(ctx, "k", db.TranscriptLimit{AfterID: all[3].ID})
	require.NoError(t, err)
	require.Equal(t, []string{"q4...", "q5..."}, prompts(got))

	// Characters are runes, not bytes: 5 + 5 runes fit in 20 (a turn may take half) however many
	// bytes they take.
	add("runes", "r1", "ééééé", strings.Repeat("🙂", 5), db.TurnDone)
	got, err = s.TurnTranscript(ctx, "runes", db.TranscriptLimit{MaxChars: 20})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, strings.Repeat("🙂", 5), got[0].Answer)

	// A huge turn (a 10 MB answer is supported) is left out wherever it is, and the turns on both
	// sides of it are kept; it is kept when the cap leaves it room (half the cap).
	huge := strings.Repeat("é", 5<<20) // 10 MB, 5 Mi characters
	add("huge", "h0", "old0", "a", db.TurnDone)
	add("huge", "h1", "old1", "a", db.TurnDone)
	add("huge", "h2", "big", huge, db.TurnDone)
	add("huge", "h3", "new3", "a", db.TurnDone)
	add("huge", "h4", "new4", "a", db.TurnDone)
	got, err = s.TurnTranscript(ctx, "huge", db.TranscriptLimit{})
	require.NoError(t, err)
	require.Equal(t, []string{"old0", "old1", "new3", "new4"}, prompts(got))
	room := 2 * (5<<20 + 3) // "big" and its answer are half of it
	got, err = s.TurnTranscript(ctx, "huge", db.TranscriptLimit{MaxChars: room})
	require.NoError(t, err)
	require.Equal(t, []string{"old0", "old1", "big", "new3", "new4"}, prompts(got))
	require.Equal(t, huge, got[2].Answer)
	got, err = s.TurnTranscript(ctx, "huge", db.TranscriptLimit{MaxChars: room - 1})
	require.NoError(t, err)
	require.Equal(t, []string{"old0", "old1", "new3", "new4"}, prompts(got))
	// The newest turn too big: left out too, and the older turns come.
	add("huge", "h5", "bignew", huge, db.TurnDone)
	got, err = s.TurnTranscript(ctx, "huge", db.TranscriptLimit{})
	require.NoError(t, err)
	require.Equal(t, []string{"old0", "old1", "new3", "new4"}, prompts(got))
}

func testTurnsStuck(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)
	ids := map[string]int64{}
	run := func(name string, at time.Time) {
		defer clock.Set(clock.Set(at))
		turn, err := s.TurnInsert(ctx, newTurn("k-"+name, name, "p"))
		require.NoError(t, err)
		_, err = s.TurnStart(ctx, turn.ID, "")
		require.NoError(t, err)
		ids[name] = turn.ID
	}
	run("r2", start.Add(2*time.Minute))
	run("r0", start)
	run("r1", start.Add(time.Minute))
	run("fresh", start.Add(10*time.Minute))
	run("done", start)
	_, err := s.TurnFinish(ctx, ids["done"], db.TurnResult{Status: db.TurnDone})
	require.NoError(t, err)
	_, err = s.TurnInsert(ctx, newTurn("k-q", "queued", "p")) // queued turns are not stuck
	require.NoError(t, err)

	eventIDs := func(turns []db.Turn) []string {
		out := make([]string, len(turns))
		for i, t := range turns {
			out[i] = t.PlatformEventID
		}
		return out
	}
	cutoff := start.Add(5 * time.Minute)
	got, err := s.TurnsStuck(ctx, cutoff, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"r0", "r1", "r2"}, eventIDs(got))
	got, err = s.TurnsStuck(ctx, cutoff, 2)
	require.NoError(t, err)
	require.Equal(t, []string{"r0", "r1"}, eventIDs(got))

	// A runtime event un-sticks a turn.
	clock.Set(start.Add(6 * time.Minute))
	require.NoError(t, s.TurnTouch(ctx, ids["r0"]))
	got, err = s.TurnsStuck(ctx, cutoff, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"r1", "r2"}, eventIDs(got))
}
