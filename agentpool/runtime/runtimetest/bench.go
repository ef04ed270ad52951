package runtimetest

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
)

// benchCycles is how many create/stop/start cycles one benchmark iteration measures: a cycle takes
// seconds, so the default -benchtime runs a single iteration, and three samples steady the figures.
const benchCycles = 3

// Bench measures, per cycle (DESIGN §9), next to the raw Docker operations:
//
//   - create-ms: raw sandbox create (docker volume + container create + start);
//   - cold-healthy-ms: create, then Ensure until the runtime is healthy;
//   - start-ms: raw docker start of a stopped sandbox;
//   - resume-healthy-ms: docker start, then Ensure until healthy.
//
// The figures are averages over the cycles, reported as custom metrics (ns/op covers all cycles).
func Bench(b *testing.B, cfg Config) {
	require.NotNil(b, cfg.New, "runtimetest.Config.New is required")
	p := Provider(b)
	rt := cfg.New(b, Model{URL: "http://127.0.0.1:1", APIKey: "unused"})
	var create, cold, start, resume time.Duration
	n := 0
	for b.Loop() {
		for range benchCycles {
			ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
			t0 := time.Now()
			h, err := p.Create(ctx, sandbox.Spec{
				Image:   Image(),
				Network: sandbox.NetworkNone,
				Labels:  sandbox.Labels{Deployment: "rtbench-" + strings.ToLower(rand.Text()[:8]), Thread: "bench", Generation: 1},
			})
			require.NoError(b, err)
			b.Cleanup(func() { _ = p.Destroy(context.Background(), h) }) // if a step fails; destroy is idempotent
			sb := sandbox.Bind(p, h)
			t1 := time.Now()
			require.NoError(b, rt.Ensure(ctx, sb))
			t2 := time.Now()
			require.NoError(b, p.Stop(ctx, h))
			t3 := time.Now()
			require.NoError(b, p.Start(ctx, h))
			t4 := time.Now()
			require.NoError(b, rt.Ensure(ctx, sb))
			t5 := time.Now()
			require.NoError(b, p.Destroy(ctx, h))
			cancel()
			create += t1.Sub(t0)
			cold += t2.Sub(t0)
			start += t4.Sub(t3)
			resume += t5.Sub(t3)
			n++
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(n) }
	b.ReportMetric(ms(create), "create-ms")
	b.ReportMetric(ms(cold), "cold-healthy-ms")
	b.ReportMetric(ms(start), "start-ms")
	b.ReportMetric(ms(resume), "resume-healthy-ms")
}
