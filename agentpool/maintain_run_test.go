package agentpool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// runDeadline only bounds a broken test: every wait below ends on a signal, not on time.
const runDeadline = 20 * time.Second

// leaderSpy reports each TryLeader result, and can fail the first calls.
type leaderSpy struct {
	db.Store
	mu       sync.Mutex // protects failures
	failures int
	tries    chan tryResult
}

type tryResult struct {
	l   db.Leader
	ok  bool
	err error
}

func newLeaderSpy(st db.Store, failures int) *leaderSpy {
	return &leaderSpy{Store: st, failures: failures, tries: make(chan tryResult, 10000)}
}

func (s *leaderSpy) TryLeader(ctx context.Context) (db.Leader, bool, error) {
	s.mu.Lock()
	fail := s.failures > 0
	s.failures--
	s.mu.Unlock()
	var r tryResult
	if fail {
		r.err = errors.New("database unreachable")
	} else {
		r.l, r.ok, r.err = s.Store.TryLeader(ctx)
	}
	select {
	case s.tries <- r:
	default:
	}
	return r.l, r.ok, r.err
}

// runMaintainer starts m.Run with a hook that reports each pass as prefix+name, and returns the
// channel of reports and a stop function that cancels Run and waits for it to return.
func runMaintainer(t *testing.T, m *Maintainer, prefix string, passes chan string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m.afterPass = func(name string) {
		select {
		case passes <- prefix + name:
		case <-ctx.Done():
		}
	}
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(runDeadline):
				t.Fatal("Run did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func nextTry(t *testing.T, spy *leaderSpy) tryResult {
	t.Helper()
	select {
	case r := <-spy.tries:
		return r
	case <-time.After(runDeadline):
		t.Fatal("TryLeader was not called")
		return tryResult{}
	}
}

func nextPass(t *testing.T, passes <-chan string) string {
	t.Helper()
	select {
	case p := <-passes:
		return p
	case <-time.After(runDeadline):
		t.Fatal("no pass ran")
		return ""
	}
}

var passRound = []string{passWatchdog, passIdle, passCleanup, passReconcile, passReaper}

func TestMaintainerRunPassesOnTicksAndStopsCleanly(t *testing.T) {
	clock := dbtest.NewClock(time.Now().UTC())
	st := dbtest.OpenSQLite(t, db.WithClock(clock.Now))
	prov := sandboxfake.New()
	h := fakeBox(t, prov, "dep", "web:idle")
	activeSessionFor(t, st, "web:idle", h)
	clock.Advance(time.Hour)

	m := newTestMaintainer(t, MaintainerConfig{Interval: 5 * time.Millisecond}, st, prov, "dep", clock, nil)
	passes := make(chan string)
	stop := runMaintainer(t, m, "", passes)
	// The first round runs on becoming leader, the next ones on ticks; always in the same order.
	for range 3 {
		for _, want := range passRound {
			require.Equal(t, want, nextPass(t, passes))
		}
	}
	require.Equal(t, db.SessionPaused, sessionStatus(t, st, "web:idle").Status, "the loop did the idle pass's work")
	require.Equal(t, sandbox.StateStopped, prov.Box(h.ID).State)

	stop()
	require.Zero(t, maintainerGoroutines(), "Run leaves no goroutine behind")
	// Leadership was released: it can be taken again at once.
	l, ok, err := st.TryLeader(context.Background())
	require.NoError(t, err)
	require.True(t, ok)
	l.Release()
}

func TestMaintainerRunRegainsLostLeadership(t *testing.T) {
	clock := dbtest.NewClock(time.Now().UTC())
	spy := newLeaderSpy(dbtest.OpenSQLite(t, db.WithClock(clock.Now)), 0)
	m := newTestMaintainer(t, MaintainerConfig{Interval: 5 * time.Millisecond}, spy, sandboxfake.New(), "dep", clock, nil)
	// Each pass is reported with the leadership term it ran in. The channel is buffered so that
	// passes never wait for the test while it watches TryLeader.
	var term atomic.Int32
	passes := make(chan string, 10000)
	m.afterPass = func(name string) {
		select {
		case passes <- fmt.Sprint(term.Load(), ":", name):
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()

	first := nextTry(t, spy)
	require.True(t, first.ok)
	term.Store(1)
	for nextPass(t, passes) != "1:"+passWatchdog {
	}
	// The connection holding leadership dies: Lost fires. Run must stop leading and ask again.
	first.l.Release()
	for {
		r := nextTry(t, spy)
		require.NoError(t, r.err)
		if r.ok {
			break
		}
	}
	// Passes run again under the new leadership. (The term is bumped only now: the old term's
	// passes all ran before Run asked for leadership again.)
	term.Store(2)
	for !strings.HasPrefix(nextPass(t, passes), "2:") {
	}
	cancel()
	<-done
	require.Zero(t, maintainerGoroutines())
}

func TestMaintainerRunLogsOnChangeOnly(t *testing.T) {
	clock := dbtest.NewClock(time.Now().UTC())
	spy := newLeaderSpy(dbtest.OpenSQLite(t, db.WithClock(clock.Now)), 3)
	core, logs := observer.New(zapcore.DebugLevel)
	m, err := NewMaintainer(MaintainerConfig{Interval: 5 * time.Millisecond},
		MaintainerDeps{Store: spy, Provider: sandboxfake.New(), Deployment: "dep", Logger: zap.New(core), Now: clock.Now})
	require.NoError(t, err)
	passes := make(chan string)
	stop := runMaintainer(t, m, "", passes)
	for range 2 {
		for _, want := range passRound {
			require.Equal(t, want, nextPass(t, passes))
		}
	}
	stop()

	require.Equal(t, 1, logs.FilterMessage("cannot ask for leadership; will retry").Len(), "three failures, one log line")
	require.Equal(t, 1, logs.FilterMessage("leadership query works again").Len())
	// Passes with nothing to do say nothing above debug.
	for _, e := range logs.FilterLevelExact(zapcore.InfoLevel).All() {
		require.True(t, strings.HasPrefix(e.Message, "lead") || e.Message == "leadership query works again", e.Message)
	}
}

func TestPassStateLogsTransitionsOnly(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	st := &passState{log: zap.New(core)}
	ctx := context.Background()
	boom := errors.New("boom")
	steps := []struct {
		rep   PassReport
		err   error
		level zapcore.Level
		msg   string // "" for nothing at info or above
	}{
		{PassReport{}, nil, 0, ""},
		{PassReport{Found: 2, Done: 2}, nil, zapcore.InfoLevel, "pass done"},
		{PassReport{}, boom, zapcore.ErrorLevel, "pass failed; will retry"},
		{PassReport{}, boom, 0, ""}, // still failing: debug only
		{PassReport{}, nil, zapcore.InfoLevel, "pass works again"},
		{PassReport{Found: 1, Failed: 1, Errors: []error{boom}}, nil, zapcore.WarnLevel, "pass done with failures"},
		{PassReport{Found: 1, Failed: 1, Errors: []error{boom}}, nil, 0, ""}, // still failing: debug only
		{PassReport{Found: 1, Skipped: 1}, nil, zapcore.InfoLevel, "pass done without failures again"},
		{PassReport{Found: 1, Skipped: 1}, nil, 0, ""},
		{PassReport{}, nil, 0, ""},
		// With the loop's context alive, Canceled (from a provider, say) is an error like any other…
		{PassReport{}, context.Canceled, zapcore.ErrorLevel, "pass failed; will retry"},
	}
	for i, s := range steps {
		logs.TakeAll()
		st.observe(ctx, s.rep, s.err)
		var loud []observer.LoggedEntry
		for _, e := range logs.TakeAll() {
			if e.Level >= zapcore.InfoLevel {
				loud = append(loud, e)
			}
		}
		if s.msg == "" {
			require.Empty(t, loud, "step %d", i)
			continue
		}
		require.Len(t, loud, 1, "step %d", i)
		require.Equal(t, s.level, loud[0].Level, "step %d", i)
		require.Equal(t, s.msg, loud[0].Message, "step %d", i)
	}
	// …but once the loop's own context has ended, a cancelled pass is not news.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	st = &passState{log: zap.New(core)}
	logs.TakeAll()
	st.observe(cctx, PassReport{}, context.Canceled)
	require.Zero(t, logs.Len())
}

func TestMaintainerRunLeadsOnOneReplicaOnly(t *testing.T) {
	url := dbtest.PostgresSchemaURL(t)
	clock := dbtest.NewClock(time.Now().UTC())
	stA := dbtest.OpenURL(t, url, db.WithClock(clock.Now))
	spyB := newLeaderSpy(dbtest.OpenURL(t, url, db.WithClock(clock.Now)), 0)
	cfg := MaintainerConfig{Interval: 10 * time.Millisecond}
	mA := newTestMaintainer(t, cfg, stA, sandboxfake.New(), "dep", clock, nil)
	mB := newTestMaintainer(t, cfg, spyB, sandboxfake.New(), "dep", clock, nil)

	passes := make(chan string)
	stopA := runMaintainer(t, mA, "A:", passes)
	require.Equal(t, "A:"+passWatchdog, nextPass(t, passes))
	runMaintainer(t, mB, "B:", passes)
	// B asks while A leads, and is refused; meanwhile only A runs passes.
	r := nextTry(t, spyB)
	require.NoError(t, r.err)
	require.False(t, r.ok, "two leaders on one database")
	for range 2 * len(passRound) {
		require.True(t, strings.HasPrefix(nextPass(t, passes), "A:"))
	}
	// A shuts down and releases leadership: B takes over within an interval or so.
	stopA()
	for {
		r := nextTry(t, spyB)
		require.NoError(t, r.err)
		if r.ok {
			break
		}
	}
	require.Equal(t, "B:"+passWatchdog, nextPass(t, passes))
}
