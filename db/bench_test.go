package db_test

import (
	"context"
	"testing"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// BenchmarkLoopQueries times one batch (100 rows) of each background loop's query on a table of
// 100,000 sessions and 100,000 turns, on both engines. DESIGN §9's target is 50 ms per batch query.
// It also logs each query's Postgres plan (benchmark logs are always printed), to show the indexes
// at work; TestLoopQueryPlans asserts them.
//
//	go test -run '^$' -bench LoopQueries ./db/
func BenchmarkLoopQueries(b *testing.B) {
	for _, engine := range []string{"postgres", "sqlite"} {
		b.Run(engine, func(b *testing.B) {
			if engine == "postgres" {
				dbtest.PostgresURL(b)
			}
			s := filledStore(b, engine, fillRows)
			for _, q := range loopQueries(fillRows) {
				b.Run(q.name, func(b *testing.B) {
					ctx := context.Background()
					// A leaf benchmark's log is printed even without -v; with b.Loop the body
					// runs once, so the plan is logged once.
					if engine == "postgres" {
						query, args := captureQuery(b, s, q)
						plan, err := db.Explain(ctx, s, query, args, false)
						if err != nil {
							b.Fatal(err)
						}
						b.Logf("EXPLAIN %s:\n%s", q.name, plan)
					}
					rows := 0
					for b.Loop() {
						n, err := q.run(ctx, s)
						if err != nil {
							b.Fatal(err)
						}
						rows = n
					}
					b.ReportMetric(float64(rows), "rows/op")
				})
			}
		})
	}
}
