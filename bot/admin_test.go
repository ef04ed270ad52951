package bot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// auditStore is a real SQLite store whose audit writes can be made to fail.
type auditStore struct {
	db.Store
	fail error
}

func (s *auditStore) AuditAppend(ctx context.Context, e db.AuditEntry) (db.AuditEntry, error) {
	if s.fail != nil {
		return db.AuditEntry{}, s.fail
	}
	return s.Store.AuditAppend(ctx, e)
}

// recordingOps records the actions run and what the audit log held when each ran.
type recordingOps struct {
	store db.AuditStore
	ran   []string
	// auditAtAction is the newest audit entry when the action ran.
	auditAtAction []db.AuditEntry
	// What the inspection commands return.
	log    agentpool.RuntimeLog
	usage  agentpool.SandboxUsage
	attach agentpool.Attach
}

var _ AdminOps = (*recordingOps)(nil)

func (o *recordingOps) act(ctx context.Context, what string) error {
	o.ran = append(o.ran, what)
	got, err := o.store.AuditList(ctx, db.AuditQuery{Limit: 1})
	if err != nil {
		return err
	}
	if len(got) > 0 {
		o.auditAtAction = append(o.auditAtAction, got[0])
	}
	return nil
}

func (o *recordingOps) Pause(ctx context.Context, k string) error   { return o.act(ctx, "pause "+k) }
func (o *recordingOps) Resume(ctx context.Context, k string) error  { return o.act(ctx, "resume "+k) }
func (o *recordingOps) Destroy(ctx context.Context, k string) error { return o.act(ctx, "destroy "+k) }
func (o *recordingOps) Reap(ctx context.Context, _ bool) (string, error) {
	return "reaped", o.act(ctx, "reap")
}
func (o *recordingOps) Drain(ctx context.Context) error { return o.act(ctx, "drain") }
func (o *recordingOps) Stats(ctx context.Context) (string, error) {
	return "stats", o.act(ctx, "stats")
}
func (o *recordingOps) Depth(string) int { return 0 }
func (o *recordingOps) RuntimeLog(ctx context.Context, k string, n int) (agentpool.RuntimeLog, error) {
	return o.log, o.act(ctx, fmt.Sprintf("logs %s %d", k, n))
}
func (o *recordingOps) SandboxUsage(ctx context.Context, k string) (agentpool.SandboxUsage, error) {
	return o.usage, o.act(ctx, "stats "+k)
}
func (o *recordingOps) Attach(ctx context.Context, k string) (agentpool.Attach, error) {
	return o.attach, o.act(ctx, "attach "+k)
}

func TestAdminAuditsBeforeActing(t *testing.T) {
	errDisk := errors.New("disk I/O error")
	for _, tc := range []struct {
		name      string
		actor     string
		argv      []string
		auditErr  error
		wantErr   error
		wantRan   []string
		wantAudit []string // results, oldest first
	}{
		{name: "audited, then done, then the outcome", actor: "slack:UADMIN", argv: []string{"destroy", "slack:T:C:1"},
			wantRan: []string{"destroy slack:T:C:1"}, wantAudit: []string{AuditStarted, AuditOK}},
		{name: "no audit, no action", actor: "slack:UADMIN", argv: []string{"destroy", "slack:T:C:1"}, auditErr: errDisk,
			wantErr: ErrAuditUnavailable},
		{name: "read-only commands too", actor: "slack:UADMIN", argv: []string{"stats"}, auditErr: errDisk,
			wantErr: ErrAuditUnavailable},
		{name: "refused users are audited and never act", actor: "slack:U2", argv: []string{"drain"},
			wantErr: ErrNotAdmin, wantAudit: []string{AuditDenied}},
		{name: "refused even when the audit fails", actor: "slack:U2", argv: []string{"drain"}, auditErr: errDisk,
			wantErr: ErrNotAdmin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &auditStore{Store: dbtest.OpenSQLite(t), fail: tc.auditErr}
			ops := &recordingOps{store: st}
			a := NewAdmin(st, ops, []string{"slack:UADMIN"}, nil)
			out, err := a.Run(t.Context(), tc.actor, tc.argv)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err, out)
			}
			if tc.auditErr != nil && errors.Is(tc.wantErr, ErrAuditUnavailable) {
				require.ErrorIs(t, err, tc.auditErr, "the cause is kept for the log")
				require.Contains(t, out, "refused")
			}
			require.Equal(t, tc.wantRan, ops.ran)

			entries, err := st.Store.AuditList(t.Context(), db.AuditQuery{})
			require.NoError(t, err)
			var results []string
			for i := len(entries) - 1; i >= 0; i-- {
				require.Equal(t, tc.actor, entries[i].Actor)
				results = append(results, entries[i].Result)
			}
			require.Equal(t, tc.wantAudit, results)
			for _, e := range ops.auditAtAction {
				require.Equal(t, AuditStarted, e.Result, "the record was written before the action ran")
				require.Equal(t, "admin "+tc.argv[0], e.Action)
			}
		})
	}
}

// TestAdminAuditCannotBeForgedWithLineSeparators: a target is the user's text. Unicode's line and
// paragraph separators (U+2028, U+2029) break lines in many viewers as \n does, so they are escaped
// like it and an entry cannot show a forged second line.
func TestAdminAuditCannotBeForgedWithLineSeparators(t *testing.T) {
	st := dbtest.OpenSQLite(t)
	a := NewAdmin(st, &recordingOps{store: st}, []string{"slack:UADMIN"}, nil)
	_, err := a.Run(t.Context(), "slack:U2", []string{"destroy", "x\u2028slack:UADMIN admin destroy y ok\u2029z\u0085w"})
	require.ErrorIs(t, err, ErrNotAdmin)
	entries, err := st.AuditList(t.Context(), db.AuditQuery{})
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, `x\u2028slack:UADMIN admin destroy y ok\u2029z\u0085w`, entries[0].Target)
}

// TestAdminReapRefusesUnknownArguments: reap destroys sandboxes, and "reap --dryrun" or "reap
// --DRY-RUN" (a typo, a case slip) ran the real thing, since only the exact --dry-run was looked for.
func TestAdminReapRefusesUnknownArguments(t *testing.T) {
	st := dbtest.OpenSQLite(t)
	ops := &recordingOps{store: st}
	a := NewAdmin(st, ops, []string{"slack:UADMIN"}, nil)
	for _, argv := range [][]string{{"reap", "--dryrun"}, {"reap", "--DRY-RUN"}, {"reap", "--dry-run", "now"}} {
		out, err := a.Run(t.Context(), "slack:UADMIN", argv)
		require.Error(t, err, "%v", argv)
		require.Contains(t, out, "usage: reap [--dry-run]")
	}
	require.Empty(t, ops.ran, "nothing was reaped")
	for _, argv := range [][]string{{"reap", "--dry-run"}, {"reap"}} {
		_, err := a.Run(t.Context(), "slack:UADMIN", argv)
		require.NoError(t, err)
	}
	require.Equal(t, []string{"reap", "reap"}, ops.ran)
}

// TestAdminAuditEntriesAreBounded: a command and its target are the sender's text, and anyone may
// send "admin destroy <40,000 characters>": the append-only log keeps a bounded, marked cut of them
// (escaping may still multiply what is kept by up to six).
func TestAdminAuditEntriesAreBounded(t *testing.T) {
	huge := strings.Repeat("x", 100_000)
	for _, tc := range []struct {
		name, actor string
		argv        []string
	}{
		{"a stranger's huge target", "slack:U2", []string{"destroy", huge}},
		{"a stranger's many arguments", "slack:U2", strings.Fields(strings.Repeat("slack:T:C:1 ", 20_000))},
		{"a stranger's huge command", "slack:U2", []string{huge}},
		{"an admin's huge target", "slack:UADMIN", []string{"inspect", huge}},
		{"an admin's huge command", "slack:UADMIN", []string{huge + "\x1b[2J"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := dbtest.OpenSQLite(t)
			_, _ = NewAdmin(st, &recordingOps{store: st}, []string{"slack:UADMIN"}, nil).Run(t.Context(), tc.actor, tc.argv)
			entries, err := st.AuditList(t.Context(), db.AuditQuery{})
			require.NoError(t, err)
			require.NotEmpty(t, entries)
			for _, e := range entries {
				require.LessOrEqual(t, utf8.RuneCountInString(e.Target), maxAuditText, "target")
				require.LessOrEqual(t, utf8.RuneCountInString(e.Action), len("admin ")+maxAuditText, "action")
			}
			if len(tc.argv) > 1 {
				require.True(t, strings.HasSuffix(entries[0].Target, "…"), "the cut is marked")
			}
		})
	}
}
