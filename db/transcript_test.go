package db_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// A transcript reads from the database only the turns it returns: a 10 MB answer that does not fit
// in the character cap is never loaded into the bot (it used to be: every one of the newest MaxTurns
// rows was read whole, then trimmed), and the turns older than it still come.
func TestTranscriptReadsOnlyKeptTurns(t *testing.T) {
	t.Parallel()
	for _, engine := range []struct {
		name string
		open dbtest.NewStore
	}{{"sqlite", dbtest.OpenSQLite}, {"postgres", dbtest.OpenPostgres}} {
		t.Run(engine.name, func(t *testing.T) {
			t.Parallel()
			if engine.name == "postgres" {
				dbtest.PostgresURL(t)
			}
			s := engine.open(t)
			ctx := t.Context()
			huge := strings.Repeat("é", 5<<20) // 10 MB, 5 Mi characters
			ids := map[string]int64{}
			add := func(event, answer string) {
				turn, err := s.TurnInsert(ctx, db.NewTurn{ThreadKey: "k", PlatformEventID: event, Prompt: event})
				require.NoError(t, err)
				_, err = s.TurnStart(ctx, turn.ID, "")
				require.NoError(t, err)
				_, err = s.TurnFinish(ctx, turn.ID, db.TurnResult{Status: db.TurnDone, Answer: answer})
				require.NoError(t, err)
				ids[event] = turn.ID
			}
			add("old1", "small")
			add("big-old", huge)
			add("new1", "small")
			add("new2", "small")

			// The big turn is left out, and never read; the others are.
			got, read, err := db.TranscriptRowsRead(ctx, s, "k", db.TranscriptLimit{})
			require.NoError(t, err)
			require.Len(t, got, 3)
			require.Equal(t, []int64{ids["new2"], ids["new1"], ids["old1"]}, read)

			// A newest turn too big for the cap: left out too, not read.
			add("big-new", huge)
			got, read, err = db.TranscriptRowsRead(ctx, s, "k", db.TranscriptLimit{})
			require.NoError(t, err)
			require.Len(t, got, 3)
			require.Equal(t, []int64{ids["new2"], ids["new1"], ids["old1"]}, read)

			// With room for it, it is read and returned (with the turn cap's worth of others).
			got, read, err = db.TranscriptRowsRead(ctx, s, "k", db.TranscriptLimit{MaxTurns: 3, MaxChars: 1 << 30})
			require.NoError(t, err)
			require.Len(t, got, 3)
			require.Equal(t, huge, got[2].Answer)
			require.Equal(t, []int64{ids["big-new"], ids["new2"], ids["new1"]}, read)
		})
	}
}
