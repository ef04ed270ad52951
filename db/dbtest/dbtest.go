// Package dbtest is the conformance suite every db.Store passes, and helpers to open test stores on
// the real services (see PostgresURL for the skip rules).
package dbtest

import (
	"context"
	"testing"
	"time"

	"github.com/threadbox/threadbox/db"
)

// NewStore opens a fresh, migrated, empty store for one test and closes it when the test ends.
// OpenSQLite and OpenPostgres are NewStores.
type NewStore func(t testing.TB, opts ...db.Option) db.Store

// start is the suite's clock origin: not UTC and with nanoseconds, to check that stores convert to
// UTC and keep microseconds.
var start = time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.FixedZone("UTC+1", 3600))

// utcMicro is what a store should give back for t.
func utcMicro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// Run runs the conformance suite. Every subtest gets its own store and runs in parallel.
func Run(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(*testing.T, NewStore)
	}{
		{"SessionCreateGet", testSessionCreateGet},
		{"SessionTransitions", testSessionTransitions},
		{"SessionTransitionWrongState", testSessionTransitionWrongState},
		{"SessionTransitionInvalid", testSessionTransitionInvalid},
		{"SessionTransitionFenced", testSessionTransitionFenced},
		{"SessionCASConcurrent", testSessionCASConcurrent},
		{"SessionUpdate", testSessionUpdate},
		{"SessionTouch", testSessionTouch},
		{"SessionsIdle", testSessionsIdle},
		{"SessionsPausedExpired", testSessionsPausedExpired},
		{"SessionsBySandboxIDs", testSessionsBySandboxIDs},
		{"SessionsUnsettled", testSessionsUnsettled},
		{"SessionsByStatus", testSessionsByStatus},
		{"SessionsLive", testSessionsLive},
		{"TurnLifecycle", testTurnLifecycle},
		{"TurnWrongState", testTurnWrongState},
		{"TurnFinishFenced", testTurnFinishFenced},
		{"TurnDedupe", testTurnDedupe},
		{"TurnDedupeConcurrent", testTurnDedupeConcurrent},
		{"TurnTranscriptCaps", testTurnTranscriptCaps},
		{"TurnsStuck", testTurnsStuck},
		{"TurnDelivery", testTurnDelivery},
		{"TurnsPendingClaim", testTurnsPendingClaim},
		{"TurnsQueuedOwned", testTurnsQueuedOwned},
		{"TurnsRunningOwned", testTurnsRunningOwned},
		{"TurnStartFirst", testTurnStartFirst},
		{"TurnInsertHeld", testTurnInsertHeld},
		{"TurnLastFailedWith", testTurnLastFailedWith},
		{"Instances", testInstances},
		{"HoldThread", testHoldThread},
		{"TurnsUndelivered", testTurnsUndelivered},
		{"TurnUsage", testTurnUsage},
		{"TurnUsageArithmetic", testTurnUsageArithmetic},
		{"TurnUsageSinceZero", testTurnUsageSinceZero},
		{"TurnFinishKeepsCountedUsage", testTurnFinishKeepsCountedUsage},
		{"ThreadRepos", testThreadRepos},
		{"ThreadRepoUnstorable", testThreadRepoUnstorable},
		{"Commands", testCommands},
		{"Artifacts", testArtifacts},
		{"ArtifactUnstorablePath", testArtifactUnstorablePath},
		{"Audit", testAudit},
		{"AuditEscapesControlCharacters", testAuditEscapesControlCharacters},
		{"UnstorableText", testUnstorableText},
		{"UnstorableJSON", testUnstorableJSON},
		{"LookupsByUnstorableKey", testLookupsByUnstorableKey},
		{"UnstorableNames", testUnstorableNames},
		{"LongKeys", testLongKeys},
		{"MigrateTwice", testMigrateTwice},
		{"LockSameKeySerial", testLockSameKeySerial},
		{"LockMutualExclusion", testLockMutualExclusion},
		{"LockDifferentKeysParallel", testLockDifferentKeysParallel},
		{"LockCancelledWait", testLockCancelledWait},
		{"Leader", testLeader},
		{"CloseReleasesLeader", testCloseReleasesLeader},
		{"CloseEndsHolds", testCloseEndsHolds},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore)
		})
	}
}

// testCtx bounds one test's store calls, so a hung lock fails the test instead of the whole run.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func ptr[T any](v T) *T { return &v }
