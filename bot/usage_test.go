package bot

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// TestUsageShown: status shows the thread's, the asker's and everyone's model use against the
// budgets that are set, and admin stats today's totals, budgets and top threads and users, with costs
// only when there is a price table. Yesterday's use counts for the thread only.
func TestUsageShown(t *testing.T) {
	now := time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)
	clock := dbtest.NewClock(now.Add(-24 * time.Hour))
	st := dbtest.OpenSQLite(t, db.WithClock(clock.Now))
	use := func(thread, user, ev string, in, out, cost int64) {
		tr, err := st.TurnInsert(t.Context(), db.NewTurn{ThreadKey: thread, PlatformEventID: ev, UserID: user, Prompt: "p"})
		require.NoError(t, err)
		_, err = st.TurnStart(t.Context(), tr.ID, "")
		require.NoError(t, err)
		require.NoError(t, st.TurnAddUsage(t.Context(), tr.ID, in, out, cost))
	}
	use("web:a", "U1", "e0", 1000, 0, 100_000) // yesterday
	clock.Advance(24 * time.Hour)
	use("web:a", "U1", "e1", 1200, 34, 250_000)
	use("web:b", "U2", "e2", 9000, 1000, 1_500_000)

	tests := []struct {
		name              string
		usage             Usage
		wantStatus        []string
		wantStats         []string
		notStatus, notAll []string
	}{
		{
			name:  "tokens, no budget",
			usage: Usage{},
			wantStatus: []string{
				"Model use: this thread 2,234 tokens (1,234 today), you today 1,234 tokens, everyone today 11,234 tokens.",
			},
			notStatus: []string{"Budget left"},
			wantStats: []string{
				"Model use today (since 2026-11-23 00:00 UTC): 11,234 tokens.",
				"Budgets: none.",
				"Top threads today:\n  web:b 10,000 tokens\n  web:a 1,234 tokens",
				"Top users today:\n  web:U2 10,000 tokens\n  web:U1 1,234 tokens",
			},
			notAll: []string{"USD"},
		},
		{
			name: "priced, with budgets",
			usage: Usage{Priced: true, Currency: "EUR", Budget: UsageBudget{
				ThreadTokens: 2000, UserDailyTokens: 5000, DailyMicros: 20_000_000}},
			wantStatus: []string{
				"this thread 2,234 tokens, 0.35 EUR (1,234 today)",
				"everyone today 11,234 tokens, 1.75 EUR.",
				"Budget left: this thread 0 of 2,000 tokens; you today 3,766 of 5,000 tokens; everyone today 18.25 of 20.00 EUR.",
			},
			wantStats: []string{
				"11,234 tokens, 1.75 EUR.",
				"Budgets: per thread 2,000 tokens; per user per day 5,000 tokens; per day 20.00 EUR (18.25 of 20.00 EUR left).",
				"web:b 10,000 tokens, 1.50 EUR",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := tc.usage
			u.Store, u.Now = st, func() time.Time { return now }
			status, err := u.statusLines(t.Context(), "web:a", "U1")
			require.NoError(t, err)
			for _, w := range tc.wantStatus {
				require.Contains(t, status, w)
			}
			for _, w := range append(tc.notStatus, tc.notAll...) {
				require.NotContains(t, status, w)
			}
			stats, err := u.statsLines(t.Context())
			require.NoError(t, err)
			for _, w := range tc.wantStats {
				require.Contains(t, stats, w)
			}
			for _, w := range tc.notAll {
				require.NotContains(t, stats, w)
			}
		})
	}
}

func TestUsageNumbers(t *testing.T) {
	for n, want := range map[int64]string{0: "0 tokens", 1: "1 token", 999: "999 tokens", 1000: "1,000 tokens", 1234567: "1,234,567 tokens"} {
		require.Equal(t, want, tokens(n))
	}
	for m, want := range map[int64]string{0: "0", 105: "0.000105", 10_000: "0.01", 12_345_678: "12.35"} {
		require.Equal(t, want, formatMoney(m))
	}
}
