package dbtest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

func newSession(key string) db.NewSession {
	return db.NewSession{
		ThreadKey: key, Platform: "slack", ChannelID: "C1", OwnerUserID: "U1", Provider: "docker", Runtime: "shell",
	}
}

// createAt creates a session and moves it to status (through creating) with the clock at 'at'.
func createAt(t *testing.T, s db.Store, clock *Clock, key string, status db.SessionStatus, at time.Time) db.Session {
	t.Helper()
	ctx := testCtx(t)
	defer clock.Set(clock.Set(at))
	sess, created, err := s.SessionCreate(ctx, newSession(key))
	require.NoError(t, err)
	require.True(t, created)
	if status != db.SessionCreating {
		sess, err = s.SessionTransition(ctx, key, db.Transition{
			From: []db.SessionStatus{db.SessionCreating}, To: status,
			Patch: db.SessionPatch{SandboxID: ptr("sb-" + key)},
		})
		require.NoError(t, err)
	}
	return sess
}

func testSessionCreateGet(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)

	_, err := s.SessionGet(ctx, "slack:T:C:1")
	require.ErrorIs(t, err, db.ErrNotFound)

	sess, created, err := s.SessionCreate(ctx, newSession("slack:T:C:1"))
	require.NoError(t, err)
	require.True(t, created)
	want := db.Session{
		ThreadKey: "slack:T:C:1", Platform: "slack", ChannelID: "C1", OwnerUserID: "U1",
		Provider: "docker", Runtime: "shell", Status: db.SessionCreating,
		LastActivityAt: utcMicro(start), CreatedAt: utcMicro(start), UpdatedAt: utcMicro(start),
	}
	require.Equal(t, want, sess)
	require.Equal(t, time.UTC, sess.CreatedAt.Location())

	// Create-if-absent: a second create returns the existing row untouched.
	clock.Advance(time.Minute)
	other := newSession("slack:T:C:1")
	other.Platform = "discord"
	again, created, err := s.SessionCreate(ctx, other)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, want, again)

	got, err := s.SessionGet(ctx, "slack:T:C:1")
	require.NoError(t, err)
	require.Equal(t, want, got)

	_, _, err = s.SessionCreate(ctx, db.NewSession{})
	require.ErrorIs(t, err, db.ErrInvalid)
	_, _, err = s.SessionCreate(ctx, db.NewSession{ThreadKey: "k", Status: "bogus"})
	require.ErrorIs(t, err, db.ErrInvalid)
}

func testSessionTransitions(t *testing.T, newStore NewStore) {
	at := utcMicro(start.Add(time.Hour))
	tests := []struct {
		name  string
		from  db.SessionStatus // the row is put in this status first
		tr    db.Transition
		check func(t *testing.T, before, after db.Session)
	}{
		{
			name: "creating to active sets handle, generation, activity",
			from: db.SessionCreating,
			tr: db.Transition{
				From: []db.SessionStatus{db.SessionCreating}, To: db.SessionActive, BumpGeneration: true,
				Patch: db.SessionPatch{
					Handle: []byte(`{"provider":"docker","id":"c1"}`), SandboxID: ptr("c1"), AgentSessionID: ptr("a1"),
					Provider: ptr("docker"),
				},
			},
			check: func(t *testing.T, before, after db.Session) {
				require.JSONEq(t, `{"provider":"docker","id":"c1"}`, string(after.Handle))
				require.Equal(t, "c1", after.SandboxID)
				require.Equal(t, "a1", after.AgentSessionID)
				require.Equal(t, "docker", after.Provider)
				require.Equal(t, before.Generation+1, after.Generation)
				require.Equal(t, at, after.LastActivityAt)
				require.True(t, after.ResumedAt.IsZero(), "not resumed: it was creating")
			},
		},
		{
			name: "pausing to paused sets paused_at",
			from: db.SessionPausing,
			tr:   db.Transition{From: []db.SessionStatus{db.SessionPausing}, To: db.SessionPaused},
			check: func(t *testing.T, before, after db.Session) {
				require.Equal(t, at, after.PausedAt)
				require.Equal(t, before.LastActivityAt, after.LastActivityAt)
			},
		},
		{
			name: "resuming to active sets resumed_at and resets failures",
			from: db.SessionResuming,
			tr: db.Transition{
				From: []db.SessionStatus{db.SessionResuming}, To: db.SessionActive, ResumeFail: db.ResumeFailReset,
				Patch: db.SessionPatch{LastError: ptr(""), LastHealthOKAt: ptr(at)},
			},
			check: func(t *testing.T, before, after db.Session) {
				require.Equal(t, at, after.ResumedAt)
				require.Equal(t, at, after.LastHealthOKAt)
				require.Zero(t, after.ResumeFailCount)
				require.Empty(t, after.LastError)
			},
		},
		{
			name: "resuming to error counts a failure",
			from: db.SessionResuming,
			tr: db.Transition{
				From: []db.SessionStatus{db.SessionResuming}, To: db.SessionError, ResumeFail: db.ResumeFailIncrement,
				Patch: db.SessionPatch{LastError: ptr("runtime unhealthy")},
			},
			check: func(t *testing.T, before, after db.Session) {
				require.Equal(t, before.ResumeFailCount+1, after.ResumeFailCount)
				require.Equal(t, "runtime unhealthy", after.LastError)
				require.True(t, after.ResumedAt.IsZero())
			},
		},
		{
			name: "any live state to destroyed sets destroyed_at, keeps the handle",
			from: db.SessionPaused,
			tr: db.Transition{
				From: []db.SessionStatus{db.SessionActive, db.SessionPaused, db.SessionError}, To: db.SessionDestroyed,
			},
			check: func(t *testing.T, before, after db.Session) {
				require.Equal(t, at, after.DestroyedAt)
				require.Equal(t, before.PausedAt, after.PausedAt)
				require.Equal(t, before.SandboxID, after.SandboxID)
			},
		},
		{
			name: "explicit generation",
			from: db.SessionDestroyed,
			tr: db.Transition{
				From: []db.SessionStatus{db.SessionDestroyed}, To: db.SessionCreating,
				Patch: db.SessionPatch{Generation: ptr(int64(7))},
			},
			check: func(t *testing.T, before, after db.Session) {
				require.Equal(t, int64(7), after.Generation)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock(start)
			s := newStore(t, db.WithClock(clock.Now))
			ctx := testCtx(t)
			before := createAt(t, s, clock, "k", tc.from, start)
			clock.Advance(time.Hour)
			after, err := s.SessionTransition(ctx, "k", tc.tr)
			require.NoError(t, err)
			require.Equal(t, tc.tr.To, after.Status)
			require.Equal(t, at, after.UpdatedAt)
			require.Equal(t, before.CreatedAt, after.CreatedAt)
			tc.check(t, before, after)
			got, err := s.SessionGet(ctx, "k")
			require.NoError(t, err)
			require.Equal(t, after, got)
		})
	}
}

func testSessionTransitionWrongState(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)
	before := createAt(t, s, clock, "k", db.SessionPaused, start)
	clock.Advance(time.Hour)

	_, err := s.SessionTransition(ctx, "k", db.Transition{
		From: []db.SessionStatus{db.SessionActive, db.SessionError}, To: db.SessionPausing,
		BumpGeneration: true, ResumeFail: db.ResumeFailIncrement,
		Patch: db.SessionPatch{Handle: []byte(`{}`), LastError: ptr("x"), SandboxID: ptr("other")},
	})
	require.ErrorIs(t, err, db.ErrConflict)
	var te *db.TransitionError
	require.True(t, errors.As(err, &te), "want *db.TransitionError, got %T", err)
	require.Equal(t, &db.TransitionError{
		Entity: "session", Key: "k", From: []string{"active", "error"}, To: "pausing", Actual: "paused",
	}, te)

	after, err := s.SessionGet(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, before, after, "a failed transition changes nothing")

	_, err = s.SessionTransition(ctx, "missing", db.Transition{
		From: []db.SessionStatus{db.SessionActive}, To: db.SessionPausing,
	})
	require.ErrorIs(t, err, db.ErrNotFound)
}

func testSessionTransitionInvalid(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	_, _, err := s.SessionCreate(ctx, newSession("k"))
	require.NoError(t, err)
	for name, tr := range map[string]db.Transition{
		"no from":        {To: db.SessionActive},
		"bad from":       {From: []db.SessionStatus{"nope"}, To: db.SessionActive},
		"bad to":         {From: []db.SessionStatus{db.SessionCreating}, To: "nope"},
		"bump and set":   {From: []db.SessionStatus{db.SessionCreating}, To: db.SessionActive, BumpGeneration: true, Patch: db.SessionPatch{Generation: ptr(int64(2))}},
		"bad handle":     {From: []db.SessionStatus{db.SessionCreating}, To: db.SessionActive, Patch: db.SessionPatch{Handle: []byte(`{`)}},
		"bad resumefail": {From: []db.SessionStatus{db.SessionCreating}, To: db.SessionActive, ResumeFail: 9},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.SessionTransition(ctx, "k", tr)
			require.ErrorIs(t, err, db.ErrInvalid)
		})
	}
	got, err := s.SessionGet(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, db.SessionCreating, got.Status)
}

// testSessionCASConcurrent: of 10 concurrent active→pausing transitions exactly one wins.
func testSessionCASConcurrent(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)
	createAt(t, s, clock, "k", db.SessionActive, start)

	const n = 10
	var (
		wg      sync.WaitGroup
		release = make(chan struct{})
		errs    = make(chan error, n)
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release // start together
			_, err := s.SessionTransition(ctx, "k", db.Transition{
				From: []db.SessionStatus{db.SessionActive}, To: db.SessionPausing, ResumeFail: db.ResumeFailIncrement,
			})
			errs <- err
		}()
	}
	close(release)
	wg.Wait()
	close(errs)
	wins := 0
	for err := range errs {
		if err == nil {
			wins++
			continue
		}
		require.ErrorIs(t, err, db.ErrConflict)
	}
	require.Equal(t, 1, wins)
	got, err := s.SessionGet(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, db.SessionPausing, got.Status)
	require.Equal(t, 1, got.ResumeFailCount, "only the winner's update applied")
}

func testSessionUpdate(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)
	before := createAt(t, s, clock, "k", db.SessionActive, start)
	clock.Advance(time.Minute)

	health := start.Add(30 * time.Second)
	after, err := s.SessionUpdate(ctx, "k", db.SessionPatch{
		Handle:         []byte(`{"provider": "docker", "id": "c2", "state": {"n": 1}}`),
		Provider:       ptr("daytona"),
		SandboxID:      ptr("c2"),
		Generation:     ptr(int64(3)),
		AgentSessionID: ptr("agent-2"),
		HandoffNote:    ptr("built the thing"),
		ResetTurnID:    ptr(int64(42)),
		LastHealthOKAt: &health,
	})
	require.NoError(t, err)
	require.JSONEq(t, `{"provider":"docker","id":"c2","state":{"n":1}}`, string(after.Handle))
	require.Equal(t, "c2", after.SandboxID)
	require.Equal(t, "daytona", after.Provider)
	require.Equal(t, int64(3), after.Generation)
	require.Equal(t, "agent-2", after.AgentSessionID)
	require.Equal(t, "built the thing", after.HandoffNote)
	require.Equal(t, int64(42), after.ResetTurnID)
	require.Equal(t, utcMicro(health), after.LastHealthOKAt)
	require.Equal(t, before.Status, after.Status)
	require.Equal(t, utcMicro(clock.Now()), after.UpdatedAt)

	// An empty patch changes only updated_at.
	clock.Advance(time.Minute)
	again, err := s.SessionUpdate(ctx, "k", db.SessionPatch{})
	require.NoError(t, err)
	after.UpdatedAt = utcMicro(clock.Now())
	require.Equal(t, after, again)

	_, err = s.SessionUpdate(ctx, "missing", db.SessionPatch{HandoffNote: ptr("x")})
	require.ErrorIs(t, err, db.ErrNotFound)
}

func testSessionTouch(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)
	createAt(t, s, clock, "k", db.SessionActive, start)

	later := clock.Advance(time.Hour)
	note := "asked: x; answered: y"
	require.NoError(t, s.SessionTouch(ctx, "k", &note))
	got, err := s.SessionGet(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, utcMicro(later), got.LastActivityAt)
	require.Equal(t, note, got.HandoffNote)

	// A clock that went backwards (another replica's) does not move activity back; no note keeps the
	// note there was.
	clock.Advance(-2 * time.Hour)
	require.NoError(t, s.SessionTouch(ctx, "k", nil))
	got, err = s.SessionGet(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, utcMicro(later), got.LastActivityAt)
	require.Equal(t, note, got.HandoffNote)

	require.ErrorIs(t, s.SessionTouch(ctx, "missing", nil), db.ErrNotFound)
}

// testSessionTransitionFenced: a transition fenced to a generation applies only at that generation, so a
// writer holding an old generation cannot change a newer sandbox's session.
func testSessionTransitionFenced(t *testing.T, newStore NewStore) {
	tests := []struct {
		name     string
		fence    int64
		bump     bool
		wantErr  error
		wantGen  int64
		wantStat db.SessionStatus
	}{
		{name: "current generation applies", fence: 2, wantGen: 2, wantStat: db.SessionPausing},
		{name: "current generation with a bump applies", fence: 2, bump: true, wantGen: 3, wantStat: db.SessionPausing},
		{name: "older generation is a conflict", fence: 1, wantErr: db.ErrConflict, wantGen: 2, wantStat: db.SessionActive},
		{name: "newer generation is a conflict", fence: 3, wantErr: db.ErrConflict, wantGen: 2, wantStat: db.SessionActive},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock(start)
			s := newStore(t, db.WithClock(clock.Now))
			ctx := testCtx(t)
			createAt(t, s, clock, "k", db.SessionActive, start)
			_, err := s.SessionUpdate(ctx, "k", db.SessionPatch{Generation: ptr(int64(2))})
			require.NoError(t, err)

			// Several from-statuses: SQLite expands them into parameters, which must not shift the fence's.
			_, err = s.SessionTransition(ctx, "k", db.Transition{
				From: []db.SessionStatus{db.SessionError, db.SessionActive, db.SessionPaused}, To: db.SessionPausing,
				IfGeneration: ptr(tc.fence), BumpGeneration: tc.bump,
			})
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				var te *db.TransitionError
				require.ErrorAs(t, err, &te)
				require.Equal(t, tc.fence, te.Generation)
				require.Equal(t, int64(2), te.ActualGeneration)
				require.Equal(t, "active", te.Actual)
				require.ErrorContains(t, err, fmt.Sprintf("at generation %d (now 2)", tc.fence))
			} else {
				require.NoError(t, err)
			}
			got, err := s.SessionGet(ctx, "k")
			require.NoError(t, err)
			require.Equal(t, tc.wantGen, got.Generation)
			require.Equal(t, tc.wantStat, got.Status)
		})
	}
}
