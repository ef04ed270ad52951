package slack

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// cpuSplit is the CPU time each part of the machine used, from /proc (Linux): the bot (this
// process), the peer (fake Slack and the sender), PostgreSQL, everything else (the kernel's
// workers, other processes), and the machine's own busy, interrupt and steal time. A burst's acks can only be as fast as the CPU the bot gets; this says
// whether the machine was saturated and by whom, which a latency figure alone does not.
type cpuSplit map[string]time.Duration

// userHZ is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on every Linux ABI).
const userHZ = 100

func readCPUSplit(peer int) cpuSplit {
	out := cpuSplit{}
	readMachine(out)
	self := os.Getpid()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		s := string(b)
		open, shut := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || shut < 0 || shut+2 > len(s) {
			continue
		}
		f := strings.Fields(s[shut+2:]) // from field 3, state
		if len(f) < 13 {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64) // field 14
		stime, _ := strconv.ParseInt(f[12], 10, 64) // field 15
		part := "other"
		switch {
		case pid == self:
			part = "bot"
		case pid == peer:
			part = "peer"
		case s[open+1:shut] == "postgres":
			part = "postgres"
		}
		out[part] += time.Duration(utime+stime) * time.Second / userHZ
	}
	return out
}

// readMachine adds the machine's own counters from /proc/stat's "cpu" line: "busy" (all but idle
// and iowait), and "irq" (hard and soft interrupts: loopback networking, charged to no process) and
// "steal" (time the hypervisor gave to other guests).
func readMachine(out cpuSplit) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return
	}
	var v [8]int64 // user nice system idle iowait irq softirq steal
	var total int64
	for i := range v {
		v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
		total += v[i]
	}
	tick := func(n int64) time.Duration { return time.Duration(n) * time.Second / userHZ }
	out["busy"] = tick(total - v[3] - v[4])
	out["irq"] = tick(v[5] + v[6])
	out["steal"] = tick(v[7])
}

// since formats what each part used from start to now, as a share of the machine over elapsed.
func (start cpuSplit) since(peer int, elapsed time.Duration) string {
	if runtime.GOOS != "linux" || elapsed <= 0 {
		return "n/a"
	}
	now := readCPUSplit(peer)
	machine := float64(elapsed) * float64(runtime.NumCPU())
	var parts []string
	for _, k := range []string{"bot", "peer", "postgres", "other", "irq", "steal"} {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", k, float64(now[k]-start[k])/machine*100))
	}
	return fmt.Sprintf("machine busy %.0f%% of %d CPUs: %s", float64(now["busy"]-start["busy"])/machine*100,
		runtime.NumCPU(), strings.Join(parts, ", "))
}
