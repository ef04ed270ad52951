package main

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
)

// The collector of the threadbox binary.
//
// Go's default (GOGC=100) collects whenever the heap doubles. The bot's live heap is small (tens of
// MB), so under a burst of events it collected several times a second, and each cycle takes a
// quarter of the CPU for its marking (one of two cores on a small machine) while acks and turn
// starts wait: at 2,000 Slack events/s with turns starting (BenchmarkEventsAck/pool+agent, eight
// interleaved pairs on a 2-core machine) the ack p99 had a median of 47 ms at GOGC=100 and 27 ms at
// 400. So the binary runs at serverGOGC, trading memory (the heap may grow to five times the live
// heap) for CPU; and where the process has a memory limit (a container's cgroup), a soft limit at
// memLimitShare of it makes the collector work harder near the limit instead of the kernel killing
// the process. GOGC and GOMEMLIMIT in the environment win over both, as Go users expect.
//
// It is applied in main only: tests drive Main in one process, and the setting is process-wide.
const (
	serverGOGC     = 400
	memLimitShare  = 0.8
	cgroupV2Max    = "/sys/fs/cgroup/memory.max"
	cgroupV1Max    = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
	cgroupV1NoMax  = int64(1) << 60 // v1 reports "no limit" as a huge page-rounded number
	minSoftLimitMB = 64             // below this a soft limit would mean collecting all the time
)

// gcPolicy is what the binary sets; zero fields are left as the runtime has them.
type gcPolicy struct {
	Percent int   // GOGC
	Limit   int64 // soft memory limit, bytes
}

// gcPolicyFor decides the policy from the environment and the process's memory limit, if any.
func gcPolicyFor(getenv func(string) string, memoryMax func() (int64, bool)) gcPolicy {
	var p gcPolicy
	if getenv("GOGC") == "" {
		p.Percent = serverGOGC
	}
	if getenv("GOMEMLIMIT") == "" {
		if max, ok := memoryMax(); ok && max >= minSoftLimitMB<<20 {
			p.Limit = int64(float64(max) * memLimitShare)
		}
	}
	return p
}

func (p gcPolicy) apply() {
	if p.Percent > 0 {
		debug.SetGCPercent(p.Percent)
	}
	if p.Limit > 0 {
		debug.SetMemoryLimit(p.Limit)
	}
}

// cgroupMemoryMax reads the memory limit of the process's cgroup (v2, else v1).
func cgroupMemoryMax() (int64, bool) {
	for _, f := range []string{cgroupV2Max, cgroupV1Max} {
		if b, err := os.ReadFile(f); err == nil {
			return parseMemoryMax(string(b))
		}
	}
	return 0, false
}

// parseMemoryMax reads a cgroup memory limit file: a byte count, or "max" (v2) or a huge number (v1)
// for none.
func parseMemoryMax(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 || n >= cgroupV1NoMax {
		return 0, false
	}
	return n, true
}

// gcSettings reads what the collector runs with, for the startup log line.
func gcSettings() (percent, limit int64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	for i, v := range []*int64{&percent, &limit} {
		if s[i].Value.Kind() == metrics.KindUint64 {
			*v = int64(s[i].Value.Uint64())
		}
	}
	return percent, limit
}
