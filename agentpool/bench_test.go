package agentpool

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	agentrt "github.com/threadbox/threadbox/agentpool/runtime"
	shellrt "github.com/threadbox/threadbox/agentpool/runtime/shell"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// stampRuntime records when each prompt reaches the runtime, then runs it.
type stampRuntime struct {
	agentrt.Runtime
	at chan time.Time
}

func (r stampRuntime) Prompt(ctx context.Context, sb sandbox.Sandbox, sid string, p agentrt.Prompt, emit func(agentrt.Event)) (agentrt.Result, error) {
	r.at <- time.Now()
	return r.Runtime.Prompt(ctx, sb, sid, p, emit)
}

// BenchmarkWarmTurnOverhead measures, on real Docker with the shell runtime and PostgreSQL, the time
// from Submit to the prompt being handed to the runtime, for a thread whose sandbox is running
// (DESIGN §9: p50 ≤ 15 ms, p99 ≤ 50 ms).
func BenchmarkWarmTurnOverhead(b *testing.B) {
	st := dbtest.OpenPostgres(b)
	dep := "poolbench-" + randomSuffix()
	prov := dockertest.New(b, docker.Options{Deployment: dep, Logger: zap.NewNop()})
	b.Cleanup(func() {
		list, _ := prov.List(context.Background(), map[string]string{sandbox.LabelDeployment: dep})
		for _, i := range list {
			_ = prov.Destroy(context.Background(), i.Handle)
		}
	})
	rt := stampRuntime{Runtime: shellrt.New(), at: make(chan time.Time, 1)}
	p, err := New(Config{Deployment: dep, Image: dockertest.Image(), Resources: sandbox.Resources{MemoryMB: 512, CPUs: 1, PIDs: 128, ExecTimeout: time.Hour}},
		Deps{Store: st, Provider: prov, Runtime: rt, Logger: zap.NewNop()})
	require.NoError(b, err)
	defer p.Shutdown(context.Background())
	sink := newCollector()
	submit(b, p, "web:bench", "warmup", "true", sink) // creates the sandbox
	<-rt.at
	sink.wait(b, 1)

	var lat []time.Duration
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		submit(b, p, "web:bench", fmt.Sprint("e", i), "true", sink)
		lat = append(lat, (<-rt.at).Sub(t0))
		sink.wait(b, 1)
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	pct := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkPoolScale drives 10,000 threads on the in-memory provider and an SQLite store, then holds
// 1,000 turns in flight at once. It reports goroutines and heap while idle and while busy, and the
// throughput of the 1,000 concurrent turns (DESIGN §9: idle threads hold no goroutine; heap ≤ 64 MB).
func BenchmarkPoolScale(b *testing.B) {
	for range b.N {
		runtime.GC()
		base := runtime.NumGoroutine()
		st := dbtest.OpenSQLite(b)
		prov := sandboxfake.New()
		gate := make(chan struct{})
		var inFlight sync.WaitGroup
		var holding bool
		var mu sync.Mutex
		rt := &scriptRuntime{promptFunc: func(ctx context.Context, sb sandbox.Sandbox, sid string, pr agentrt.Prompt, emit func(agentrt.Event)) (agentrt.Result, error) {
			mu.Lock()
			hold := holding
			mu.Unlock()
			if hold {
				inFlight.Done()
				<-gate
			}
			return agentrt.Result{Answer: "ok"}, nil
		}}
		p, err := New(Config{Deployment: "scale", Image: "x"}, Deps{Store: st, Provider: prov, Runtime: rt, Logger: zap.NewNop()})
		require.NoError(b, err)
		sink := newCollector()
		sink.got = make(chan Outcome, 20000)

		threads, concurrent := benchScale()
		start := time.Now()
		for i := range threads {
			submit(b, p, fmt.Sprint("web:t", i), fmt.Sprint("a", i), "hi", sink)
		}
		sink.wait(b, threads)
		createRate := float64(threads) / time.Since(start).Seconds()
		require.Equal(b, threads, prov.Len())

		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(runtime.NumGoroutine()-base), "idle-goroutines")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "idle-heap-MB")
		b.ReportMetric(createRate, "first-turns/s")

		mu.Lock()
		holding = true
		mu.Unlock()
		inFlight.Add(concurrent)
		start = time.Now()
		for i := range concurrent {
			submit(b, p, fmt.Sprint("web:t", i), fmt.Sprint("b", i), "hi", sink)
		}
		inFlight.Wait() // all 1,000 turns are inside the runtime at once
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(runtime.NumGoroutine()-base), "busy-goroutines")
		b.ReportMetric(float64(runtime.NumGoroutine()-base)/float64(concurrent), "goroutines/turn")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "busy-heap-MB")
		close(gate)
		sink.wait(b, concurrent)
		b.ReportMetric(float64(concurrent)/time.Since(start).Seconds(), "concurrent-turns/s")
		require.NoError(b, p.Shutdown(context.Background()))
	}
}

// benchScale is BenchmarkPoolScale's size: 100,000 threads and 10,000 turns in flight (the Core
// issue's figures), or THREADBOX_BENCH_THREADS / THREADBOX_BENCH_CONCURRENT.
func benchScale() (threads, concurrent int) {
	threads, concurrent = 100_000, 10_000
	if n, err := strconv.Atoi(os.Getenv("THREADBOX_BENCH_THREADS")); err == nil && n > 0 {
		threads = n
	}
	if n, err := strconv.Atoi(os.Getenv("THREADBOX_BENCH_CONCURRENT")); err == nil && n > 0 {
		concurrent = min(n, threads)
	}
	return threads, concurrent
}
