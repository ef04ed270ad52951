package db_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// BenchmarkTurnInsertIntake measures TurnInsert alone, as the ack path calls it: 2,000 callers sent
// open-loop at 2,000/s (each on its own goroutine at its scheduled time, latency from that time), so
// on Postgres concurrent inserts share a commit (pg_intake.go). It reports the latency percentiles;
// the Slack ack target (p99 ≤ 10 ms) includes this.
//
//	go test -run '^$' -bench TurnInsertIntake ./db/
func BenchmarkTurnInsertIntake(b *testing.B) {
	for _, engine := range []string{"postgres", "sqlite"} {
		b.Run(engine, func(b *testing.B) {
			var s db.Store
			if engine == "postgres" {
				s = dbtest.OpenPostgres(b)
			} else {
				s = dbtest.OpenSQLite(b)
			}
			const n, rate = 2000, 2000
			interval := time.Second / rate
			var all []time.Duration
			for i := range b.N {
				lat := make([]time.Duration, n)
				var wg sync.WaitGroup
				var errs sync.Map
				start := time.Now()
				for j := range n {
					at := start.Add(time.Duration(j) * interval)
					time.Sleep(time.Until(at)) // the load generator's pacing, not synchronisation
					wg.Go(func() {
						_, err := s.TurnInsert(context.Background(), db.NewTurn{
							ThreadKey: fmt.Sprintf("slack:T:C%02d:1", j%50), PlatformEventID: fmt.Sprintf("ev-%d-%d", i, j),
							UserID: "U1", Prompt: "echo hi", Delivery: []byte(`{"platform":"slack","channel":"C1"}`), Owner: "bench",
						})
						lat[j] = time.Since(at)
						if err != nil {
							errs.Store(j, err)
						}
					})
				}
				wg.Wait()
				errs.Range(func(k, v any) bool { b.Fatalf("insert %v: %v", k, v); return false })
				all = append(all, lat...)
			}
			slices.Sort(all)
			pct := func(p float64) float64 {
				return float64(all[min(len(all)-1, int(p*float64(len(all))))].Microseconds()) / 1000
			}
			b.ReportMetric(pct(0.5), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(pct(1), "max-ms")
		})
	}
}
