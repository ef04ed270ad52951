package main

import (
	"io/fs"
	"os"
	pathpkg "path"
	"runtime/debug"
	"runtime/metrics"
	"slices"
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

// cgroupMemoryMax reads the memory limit of the process's cgroup.
func cgroupMemoryMax() (int64, bool) { return memoryMaxIn(os.DirFS("/")) }

// memoryMaxIn finds the tightest memory limit on the process's cgroup and its parents, as
// /proc/self/cgroup names them in fsys (the root): a limit may be set on a parent only (a pod's, a
// systemd slice's), and without a cgroup namespace the process's own is not at the mount's root.
// cgroup v2 first, then v1's memory controller.
func memoryMaxIn(fsys fs.FS) (int64, bool) {
	b, _ := fs.ReadFile(fsys, "proc/self/cgroup")
	v2, v1 := "/", "/"
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			v1 = parts[2]
		}
	}
	if n, ok := tightest(fsys, "sys/fs/cgroup", v2, "memory.max"); ok {
		return n, true
	}
	return tightest(fsys, "sys/fs/cgroup/memory", v1, "memory.limit_in_bytes")
}

// tightest reads file in the cgroup directory at path below root and in each of its parents up to
// root, and returns the smallest limit found.
func tightest(fsys fs.FS, root, path, file string) (int64, bool) {
	var best int64
	found := false
	for dir := pathpkg.Clean("/" + path); ; dir = pathpkg.Dir(dir) {
		if b, err := fs.ReadFile(fsys, pathpkg.Join(root, dir, file)); err == nil {
			if n, ok := parseMemoryMax(string(b)); ok && (!found || n < best) {
				best, found = n, true
			}
		}
		if dir == "/" {
			return best, found
		}
	}
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
