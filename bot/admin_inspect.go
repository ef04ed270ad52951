package bot

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/threadbox/threadbox/agentpool"
)

// Stat is one figure behind /metrics: a series name, its labels as "k=v" pairs, and its value.
type Stat struct {
	Name   string
	Labels string
	Value  float64
}

// WithNumbers makes the global stats include the figures behind /metrics, read by numbers, and
// returns a.
func (a *Admin) WithNumbers(numbers func(ctx context.Context) ([]Stat, error)) *Admin {
	a.numbers = numbers
	return a
}

// globalStats is the pool's summary and, when wired, the numbers behind /metrics.
func (a *Admin) globalStats(ctx context.Context) (string, error) {
	out, err := a.ops.Stats(ctx)
	if err == nil && a.usage != nil {
		var usage string
		if usage, err = a.usage.statsLines(ctx); err == nil {
			out += "\n\n" + usage
		}
	}
	if err != nil || a.numbers == nil {
		return out, err
	}
	stats, err := a.numbers(ctx)
	if err != nil {
		return "", fmt.Errorf("reading the metrics: %w", err)
	}
	sort.Slice(stats, func(i, j int) bool {
		if stats[i].Name != stats[j].Name {
			return stats[i].Name < stats[j].Name
		}
		return stats[i].Labels < stats[j].Labels
	})
	var b strings.Builder
	b.WriteString(out)
	b.WriteString("\n\nThe numbers behind /metrics (counters since this process started):")
	for _, s := range stats {
		name := s.Name
		if s.Labels != "" {
			name += "{" + s.Labels + "}"
		}
		fmt.Fprintf(&b, "\n  %s %s", name, formatValue(s.Value))
	}
	return b.String(), nil
}

func formatValue(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprint(int64(v))
	}
	return fmt.Sprintf("%.3f", v)
}

// notRunning says why a thread's sandbox cannot be looked into, and what to do; "" when it runs.
func notRunning(v agentpool.SandboxView) string {
	if v.Running() {
		return ""
	}
	switch v.State {
	case agentpool.StateNone:
		return fmt.Sprintf("%s has no sandbox (none was created, or it was destroyed): its next message creates one.", v.ThreadKey)
	case agentpool.StateMissing:
		return fmt.Sprintf("%s: sandbox %s is gone (removed behind the bot's back): its next message recreates it.", v.ThreadKey, v.SandboxID)
	}
	return fmt.Sprintf("%s: sandbox %s is %s, not running: `resume %s` starts it.", v.ThreadKey, v.SandboxID, v.State, v.ThreadKey)
}

func header(v agentpool.SandboxView) string {
	return fmt.Sprintf("%s: sandbox %s (%s, generation %d)", v.ThreadKey, v.SandboxID, v.Provider, v.Generation)
}

func (a *Admin) logs(ctx context.Context, key string, n int) (string, error) {
	l, err := a.ops.RuntimeLog(ctx, key, n)
	if err != nil {
		return "", err
	}
	if l.Path == "" {
		return fmt.Sprintf("%s: the %s runtime keeps no log of its own: each message runs as its own process, and its output is the answer in the thread.", key, l.Runtime), nil
	}
	if msg := notRunning(l.SandboxView); msg != "" {
		return msg, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\nLast %d lines of %s (%s runtime):\n", header(l.SandboxView), n, l.Path, l.Runtime)
	tail := strings.TrimRight(l.Tail, "\n")
	if tail == "" {
		tail = "(empty)"
	}
	b.WriteString("```\n" + noFence(tail) + "\n```")
	if l.Truncated {
		fmt.Fprintf(&b, "\n(cut at %s)", HumanSize(agentpool.MaxLogBytes))
	}
	return b.String(), nil
}

// noFence breaks every run of three or more backticks in s with zero-width spaces, so that s cannot
// end the code block it is shown in. Replacing "```" alone left a longer run a fence ("````" became
// "`\u200b```"); with every pair split, no more than two backticks are ever adjacent.
func noFence(s string) string { return strings.ReplaceAll(s, "``", "`\u200b`") }

func (a *Admin) sandboxStats(ctx context.Context, key string) (string, error) {
	u, err := a.ops.SandboxUsage(ctx, key)
	if err != nil {
		return "", err
	}
	if msg := notRunning(u.SandboxView); msg != "" {
		return msg, nil
	}
	var b strings.Builder
	b.WriteString(header(u.SandboxView))
	if u.HasStats {
		mem := HumanSize(int64(u.MemoryBytes))
		if u.MemoryLimit > 0 {
			mem += " of " + HumanSize(int64(u.MemoryLimit))
		}
		fmt.Fprintf(&b, "\nCPU: %.1f%% (100%% = one core)\nMemory: %s\nProcesses: %d", u.CPUPercent, mem, u.PIDs)
		fmt.Fprintf(&b, "\nNetwork: %s in, %s out\nDisk I/O: %s read, %s written",
			HumanSize(int64(u.NetRxBytes)), HumanSize(int64(u.NetTxBytes)),
			HumanSize(int64(u.BlockReadBytes)), HumanSize(int64(u.BlockWriteBytes)))
	} else {
		fmt.Fprintf(&b, "\nThe %s provider reports no CPU, memory or network figures.", u.Provider)
	}
	if u.DiskBytes >= 0 {
		fmt.Fprintf(&b, "\nDisk: %s in the working directory", HumanSize(u.DiskBytes))
	} else {
		b.WriteString("\nDisk: could not be measured")
	}
	return b.String(), nil
}

func (a *Admin) attach(ctx context.Context, key string) (string, error) {
	at, err := a.ops.Attach(ctx, key)
	if err != nil {
		return "", err
	}
	switch {
	case at.State == agentpool.StateNone || at.State == agentpool.StateMissing:
		return notRunning(at.SandboxView), nil
	case at.Command == "":
		return fmt.Sprintf("%s: the %s provider offers no shell access.", header(at.SandboxView), at.Provider), nil
	}
	out := fmt.Sprintf("%s\nRun this on a machine that reaches the sandbox provider (it opens a shell as the sandbox's user, in its working directory):\n```\n%s\n```", header(at.SandboxView), at.Command)
	if msg := notRunning(at.SandboxView); msg != "" {
		out += "\n" + msg
	}
	return out, nil
}
