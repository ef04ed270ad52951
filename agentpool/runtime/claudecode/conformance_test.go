package claudecode

import (
	"testing"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
)

func newForFake(_ testing.TB, m runtimetest.Model) runtime.Runtime {
	return New(Config{BaseURL: m.URL, APIKey: m.APIKey, Model: "claude-sonnet-4-5"})
}

func TestConformance(t *testing.T) {
	runtimetest.Run(t, runtimetest.Config{New: newForFake})
}

// BenchmarkLifecycle reports cold create → healthy and stopped → healthy next to raw docker
// create and start (make bench).
func BenchmarkLifecycle(b *testing.B) {
	runtimetest.Bench(b, runtimetest.Config{New: newForFake})
}
