package dbtest

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

func testArtifacts(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)
	t1, err := s.TurnInsert(ctx, newTurn("k", "ev1", "make a chart"))
	require.NoError(t, err)
	t2, err := s.TurnInsert(ctx, newTurn("k", "ev2", "again"))
	require.NoError(t, err)

	a, err := s.ArtifactRecord(ctx, db.NewArtifact{
		TurnID: t1.ID, Path: "output/display/chart.png", SHA256: "aaa", Size: 1234, PlatformFileID: "F1",
	})
	require.NoError(t, err)
	require.Equal(t, db.Artifact{
		ID: a.ID, TurnID: t1.ID, ThreadKey: "k", Path: "output/display/chart.png", SHA256: "aaa", Size: 1234,
		UploadedAt: utcMicro(start), PlatformFileID: "F1",
	}, a)

	got, err := s.ArtifactLookup(ctx, "k", "output/display/chart.png", "aaa")
	require.NoError(t, err)
	require.Equal(t, a, got)

	// Changed content is a different artifact; the same content uploaded again returns the newest.
	_, err = s.ArtifactLookup(ctx, "k", "output/display/chart.png", "bbb")
	require.ErrorIs(t, err, db.ErrNotFound)
	clock.Advance(time.Minute)
	again, err := s.ArtifactRecord(ctx, db.NewArtifact{
		TurnID: t2.ID, Path: "output/display/chart.png", SHA256: "aaa", Size: 1234, PlatformFileID: "F2",
	})
	require.NoError(t, err)
	got, err = s.ArtifactLookup(ctx, "k", "output/display/chart.png", "aaa")
	require.NoError(t, err)
	require.Equal(t, again, got)
	require.Equal(t, "F2", got.PlatformFileID)

	// Lookups are per thread.
	_, err = s.ArtifactLookup(ctx, "other", "output/display/chart.png", "aaa")
	require.ErrorIs(t, err, db.ErrNotFound)

	_, err = s.ArtifactRecord(ctx, db.NewArtifact{TurnID: 987654, Path: "x", SHA256: "y"})
	require.ErrorIs(t, err, db.ErrNotFound)
	_, err = s.ArtifactRecord(ctx, db.NewArtifact{TurnID: t1.ID, Path: "", SHA256: "y"})
	require.ErrorIs(t, err, db.ErrInvalid)
}

func testAudit(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)

	got, err := s.AuditList(ctx, db.AuditQuery{})
	require.NoError(t, err)
	require.Empty(t, got)

	var appended []db.AuditEntry
	for i := range 5 {
		clock.Advance(time.Second)
		e, err := s.AuditAppend(ctx, db.AuditEntry{
			Actor: "U-admin", Action: "destroy", Target: fmt.Sprintf("slack:T:C:%d", i), Result: "ok",
			At: start.Add(-time.Hour), // ignored: the store stamps the time
		})
		require.NoError(t, err)
		require.NotZero(t, e.ID)
		require.Equal(t, utcMicro(clock.Now()), e.At)
		appended = append(appended, e)
	}

	got, err = s.AuditList(ctx, db.AuditQuery{})
	require.NoError(t, err)
	require.Len(t, got, 5)
	for i := range got {
		require.Equal(t, appended[4-i], got[i], "newest first")
	}

	page1, err := s.AuditList(ctx, db.AuditQuery{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []db.AuditEntry{appended[4], appended[3]}, page1)
	page2, err := s.AuditList(ctx, db.AuditQuery{Limit: 2, BeforeID: page1[1].ID})
	require.NoError(t, err)
	require.Equal(t, []db.AuditEntry{appended[2], appended[1]}, page2)

	_, err = s.AuditAppend(ctx, db.AuditEntry{Action: "x"})
	require.ErrorIs(t, err, db.ErrInvalid)
}

// testAuditEscapesControlCharacters: a target typed by a chat user is stored on both engines (NUL
// would fail PostgreSQL and so the action), and reads back escaped, one line, no terminal escapes.
func testAuditEscapesControlCharacters(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	for _, tc := range []struct{ name, target, want string }{
		{"NUL", "slack:T:C:1\x00; drop", `slack:T:C:1\x00; drop`},
		{"forged line", "web:a\nadmin destroy web:b ok", `web:a\nadmin destroy web:b ok`},
		{"terminal escape", "\x1b[2Jweb:x\r", `\x1b[2Jweb:x\r`},
		{"bidi override", "web:\u202eevil", `web:\u202eevil`},
		{"invalid UTF-8", "web:\xff\xfe", `web:\xff\xfe`},
		{"backslash is doubled", `web:\x00`, `web:\\x00`},
		{"ordinary text is kept", "slack:T1:C1:1700000000.000100 ünïcode", "slack:T1:C1:1700000000.000100 ünïcode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := s.AuditAppend(ctx, db.AuditEntry{Actor: "slack:U\x00", Action: "admin destroy", Target: tc.target, Result: "started"})
			require.NoError(t, err)
			require.Equal(t, tc.want, e.Target)
			require.Equal(t, `slack:U\x00`, e.Actor)
			got, err := s.AuditList(ctx, db.AuditQuery{Limit: 1})
			require.NoError(t, err)
			require.Equal(t, tc.want, got[0].Target)
		})
	}
}

func testMigrateTwice(t *testing.T, newStore NewStore) {
	s := newStore(t) // already migrated once
	ctx := testCtx(t)
	v1, err := s.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Positive(t, v1)
	_, _, err = s.SessionCreate(ctx, newSession("kept"))
	require.NoError(t, err)

	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Migrate(ctx))
	v2, err := s.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, v1, v2)
	_, err = s.SessionGet(ctx, "kept")
	require.NoError(t, err, "migrating again keeps the data")
	require.NoError(t, s.Ping(ctx))
}

// testUnstorableText: prompts, answers, errors and notes come from chat users and agents, and may
// hold NUL or invalid UTF-8, which PostgreSQL text refuses (SQLite stored them, so the engines
// disagreed, and on PostgreSQL a turn whose answer had a NUL could not finish). Both engines store
// them with U+FFFD in their place; keys with them are refused as invalid.
func testUnstorableText(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	huge := strings.Repeat("é🙂", 1<<20/6)
	for i, tc := range []struct{ name, in, want string }{
		{"NUL", "a\x00b", "a\uFFFDb"},
		{"invalid UTF-8", "a\xff\xfeb", "a\uFFFDb"},
		{"cut rune", "ok🙂"[:4], "ok\uFFFD"},
		{"U+FFFD and odd Unicode kept", "\uFFFD\u2028\u202e\U0010FFFF", "\uFFFD\u2028\u202e\U0010FFFF"},
		{"1 MiB", huge, huge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			thread := fmt.Sprintf("text-%d", i)
			turn, err := s.TurnInsert(ctx, newTurn(thread, thread, tc.in))
			require.NoError(t, err)
			require.Equal(t, tc.want, turn.Prompt)
			turn, err = s.TurnFinish(ctx, turn.ID, db.TurnResult{Status: db.TurnFailed, Answer: tc.in, Error: tc.in})
			require.NoError(t, err, "a turn finishes whatever its answer holds")
			require.Equal(t, tc.want, turn.Answer)
			require.Equal(t, tc.want, turn.Error)
			got, err := s.TurnLastFailedWith(ctx, thread, tc.in)
			require.NoError(t, err, "looked up by the error it was given")
			require.Equal(t, turn, got)

			_, _, err = s.SessionCreate(ctx, newSession(thread))
			require.NoError(t, err)
			require.NoError(t, s.SessionTouch(ctx, thread, &tc.in))
			sess, err := s.SessionGet(ctx, thread)
			require.NoError(t, err)
			require.Equal(t, tc.want, sess.HandoffNote)
			sess, err = s.SessionUpdate(ctx, thread, db.SessionPatch{LastError: &tc.in, HandoffNote: &tc.in})
			require.NoError(t, err)
			require.Equal(t, tc.want, sess.LastError)
			require.Equal(t, tc.want, sess.HandoffNote)
			sess, err = s.SessionTransition(ctx, thread, db.Transition{
				From: []db.SessionStatus{db.SessionCreating}, To: db.SessionError, Patch: db.SessionPatch{LastError: &tc.in},
			})
			require.NoError(t, err)
			require.Equal(t, tc.want, sess.LastError)
		})
	}
	t.Run("keys refused", func(t *testing.T) {
		for _, key := range []string{"k\x00", "k\xff"} {
			_, _, err := s.SessionCreate(ctx, newSession(key))
			require.ErrorIs(t, err, db.ErrInvalid)
			_, err = s.TurnInsert(ctx, newTurn(key, "ev-"+key, "p"))
			require.ErrorIs(t, err, db.ErrInvalid)
			_, err = s.TurnInsert(ctx, newTurn("k", key, "p"))
			require.ErrorIs(t, err, db.ErrInvalid)
		}
	})
}

// testUnstorableJSON: PostgreSQL jsonb refuses the escape \u0000 (json.Marshal writes it for a NUL in
// a user's file name or note) and unpaired surrogate escapes, where SQLite stored them, so a turn
// with such a delivery could not be recorded on PostgreSQL. Both engines store U+FFFD in their place;
// an escaped backslash followed by "u0000" is text and stays.
func testUnstorableJSON(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	in := `{"files":[{"name":"a\u0000b","ref":"\\u0000"}],"notes":["\\\u0000","\u00001",` +
		`"\ud800","x\udc00\ud83d","\ud83d\ude00\ud83d\ud83d\ude00"]}`
	want := `{"files":[{"name":"a\ufffdb","ref":"\\u0000"}],"notes":["\\\ufffd","\ufffd1",` +
		`"\ufffd","x\ufffd\ufffd","\ud83d\ude00\ufffd\ud83d\ude00"]}`

	nt := newTurn("k", "ev", "p")
	nt.Delivery = []byte(in)
	turn, err := s.TurnInsert(ctx, nt)
	require.NoError(t, err)
	require.JSONEq(t, want, string(turn.Delivery))
	turn, err = s.TurnFinish(ctx, turn.ID, db.TurnResult{Status: db.TurnDone, Usage: []byte(in)})
	require.NoError(t, err)
	require.JSONEq(t, want, string(turn.Usage))
	got, err := s.TurnGet(ctx, turn.ID)
	require.NoError(t, err)
	require.JSONEq(t, want, string(got.Delivery))

	_, _, err = s.SessionCreate(ctx, newSession("k"))
	require.NoError(t, err)
	sess, err := s.SessionUpdate(ctx, "k", db.SessionPatch{Handle: []byte(in)})
	require.NoError(t, err)
	require.JSONEq(t, want, string(sess.Handle))
	sess, err = s.SessionTransition(ctx, "k", db.Transition{
		From: []db.SessionStatus{db.SessionCreating}, To: db.SessionActive, Patch: db.SessionPatch{Handle: []byte(in)},
	})
	require.NoError(t, err)
	require.JSONEq(t, want, string(sess.Handle))
}

// testArtifactUnstorablePath: an artifact's path is a file name the agent chose, and Linux allows any
// bytes but NUL and '/' in one. PostgreSQL refused invalid UTF-8 with a raw driver error, in the
// lookup too, which ended the collection of the turn's every artifact, while SQLite stored it. Both
// engines now store and look up the path with U+FFFD in place of what text cannot hold, as for
// other free text; a long path (PATH_MAX) works on both too.
func testArtifactUnstorablePath(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	tr, err := s.TurnInsert(ctx, newTurn("k", "ev1", "p"))
	require.NoError(t, err)
	var long strings.Builder
	for i := 0; long.Len() < 4000; i++ {
		// Incompressible, as PostgreSQL would otherwise compress it into its index.
		sum := sha256.Sum256([]byte{byte(i), byte(i >> 8)})
		long.WriteString(base64.RawURLEncoding.EncodeToString(sum[:]) + "/")
	}
	for _, tc := range []struct{ name, path, want string }{
		{"invalid UTF-8", "output/\xff\xfe.txt", "output/\uFFFD.txt"},
		{"NUL", "output/a\x00b", "output/a\uFFFDb"},
		{"PATH_MAX", long.String()[:4000], long.String()[:4000]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.ArtifactLookup(ctx, "k", tc.path, "aaa")
			require.ErrorIs(t, err, db.ErrNotFound)
			a, err := s.ArtifactRecord(ctx, db.NewArtifact{TurnID: tr.ID, Path: tc.path, SHA256: "aaa", Size: 1, PlatformFileID: "F\x001"})
			require.NoError(t, err)
			require.Equal(t, tc.want, a.Path)
			require.Equal(t, "F\uFFFD1", a.PlatformFileID)
			got, err := s.ArtifactLookup(ctx, "k", tc.path, "aaa")
			require.NoError(t, err)
			require.Equal(t, a, got)
		})
	}
}

// testLookupsByUnstorableKey: a key with NUL or invalid UTF-8 names no row (the stores refuse to
// create one), and asking for one answers so on both engines: not found, or nothing. PostgreSQL
// failed each such call with a raw driver error ("invalid byte sequence for encoding UTF8") where
// SQLite answered not found; an admin's typed thread key (the web admin API takes JSON, which may
// hold \u0000) reached them.
func testLookupsByUnstorableKey(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	_, _, err := s.SessionCreate(ctx, newSession("k"))
	require.NoError(t, err)
	for _, key := range []string{"k\x00", "k\xff"} {
		t.Run(fmt.Sprintf("%q", key), func(t *testing.T) {
			notFound := map[string]error{}
			_, notFound["SessionGet"] = s.SessionGet(ctx, key)
			_, notFound["SessionUpdate"] = s.SessionUpdate(ctx, key, db.SessionPatch{LastError: ptr("x")})
			_, notFound["SessionTransition"] = s.SessionTransition(ctx, key, db.Transition{From: []db.SessionStatus{db.SessionActive}, To: db.SessionPausing})
			_, notFound["TurnGetByEvent"] = s.TurnGetByEvent(ctx, key)
			_, notFound["TurnGetRunning"] = s.TurnGetRunning(ctx, key)
			_, notFound["TurnLastFailedWith"] = s.TurnLastFailedWith(ctx, key, "e")
			_, notFound["ThreadRepoGet"] = s.ThreadRepoGet(ctx, key)
			_, notFound["ThreadRepoPushed"] = s.ThreadRepoPushed(ctx, key, "h/o/r", "abc")
			for what, err := range notFound {
				require.ErrorIs(t, err, db.ErrNotFound, what)
			}

			none := map[string]func() (int, error){
				"SessionsBySandboxIDs": func() (int, error) {
					r, err := s.SessionsBySandboxIDs(ctx, []string{key})
					return len(r), err
				},
				"TurnTranscript": func() (int, error) { r, err := s.TurnTranscript(ctx, key, db.TranscriptLimit{}); return len(r), err },
				"TurnsPendingInThread": func() (int, error) {
					r, err := s.TurnsPendingInThread(ctx, key, 1<<40, "me", 10)
					return len(r), err
				},
				"ThreadReposByKeys": func() (int, error) { r, err := s.ThreadReposByKeys(ctx, []string{key}); return len(r), err },
			}
			for what, f := range none {
				n, err := f()
				require.NoError(t, err, what)
				require.Zero(t, n, what)
			}
			live, err := s.SessionsLive(ctx, key, 10)
			require.NoError(t, err, "SessionsLive")
			require.Equal(t, []string{"k"}, live)
			totals, err := s.TurnUsageTotals(ctx, key, key, start)
			require.NoError(t, err, "TurnUsageTotals")
			require.Zero(t, totals.Thread+totals.User)
			require.ErrorIs(t, s.SessionTouch(ctx, key, nil), db.ErrNotFound, "SessionTouch")
		})
	}
}

// testUnstorableNames: identifiers a session or turn records (platform, channel, owner, provider,
// runtime, sandbox id, the agent's session id, the turn's user) with NUL or invalid UTF-8 are refused
// as invalid on both engines; PostgreSQL failed with a raw driver error while SQLite stored them. The
// agent's session id comes from the agent's own output.
func testUnstorableNames(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	_, _, err := s.SessionCreate(ctx, newSession("k"))
	require.NoError(t, err)
	for _, bad := range []string{"x\x00", "x\xff"} {
		for name, ns := range map[string]db.NewSession{
			"platform": {Platform: bad}, "channel": {ChannelID: bad}, "owner": {OwnerUserID: bad},
			"provider": {Provider: bad}, "runtime": {Runtime: bad},
		} {
			ns.ThreadKey = "new"
			_, _, err := s.SessionCreate(ctx, ns)
			require.ErrorIs(t, err, db.ErrInvalid, "SessionCreate %s %q", name, bad)
		}
		for name, p := range map[string]db.SessionPatch{
			"provider": {Provider: ptr(bad)}, "runtime": {Runtime: ptr(bad)},
			"sandbox id": {SandboxID: ptr(bad)}, "agent session id": {AgentSessionID: ptr(bad)},
		} {
			_, err := s.SessionUpdate(ctx, "k", p)
			require.ErrorIs(t, err, db.ErrInvalid, "SessionUpdate %s %q", name, bad)
			_, err = s.SessionTransition(ctx, "k", db.Transition{From: []db.SessionStatus{db.SessionActive}, To: db.SessionActive, Patch: p})
			require.ErrorIs(t, err, db.ErrInvalid, "SessionTransition %s %q", name, bad)
		}
		nt := newTurn("k", "ev-user", "p")
		nt.UserID = bad
		_, err := s.TurnInsert(ctx, nt)
		require.ErrorIs(t, err, db.ErrInvalid, "TurnInsert user %q", bad)
	}
	_, err = s.SessionGet(ctx, "new")
	require.ErrorIs(t, err, db.ErrNotFound, "nothing was created")
}

// testLongKeys: a key longer than db.MaxKeyBytes is refused as invalid on both engines. PostgreSQL
// failed with a raw driver error once an incompressible one passed its btree entry limit (2704 bytes:
// thread keys, event ids, users and sandbox ids are indexed), while SQLite stored any length.
func testLongKeys(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	var b strings.Builder
	for i := 0; b.Len() <= 3000; i++ {
		sum := sha256.Sum256([]byte{byte(i), byte(i >> 8)})
		b.WriteString(base64.RawURLEncoding.EncodeToString(sum[:]))
	}
	long := b.String()
	ok := long[:db.MaxKeyBytes]
	_, _, err := s.SessionCreate(ctx, newSession(ok))
	require.NoError(t, err, "a key of MaxKeyBytes")

	_, _, err = s.SessionCreate(ctx, newSession(long))
	require.ErrorIs(t, err, db.ErrInvalid)
	_, err = s.TurnInsert(ctx, newTurn(long, "ev", "p"))
	require.ErrorIs(t, err, db.ErrInvalid)
	_, err = s.TurnInsert(ctx, newTurn("k", long, "p"))
	require.ErrorIs(t, err, db.ErrInvalid)
	nt := newTurn("k", "ev2", "p")
	nt.UserID = long
	_, err = s.TurnInsert(ctx, nt)
	require.ErrorIs(t, err, db.ErrInvalid)
	_, err = s.SessionUpdate(ctx, ok, db.SessionPatch{SandboxID: ptr(long)})
	require.ErrorIs(t, err, db.ErrInvalid)
}
