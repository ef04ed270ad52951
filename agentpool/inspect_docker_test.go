package agentpool

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db/dbtest"
)

// loggingRuntime is the shell runtime with a log of its own, as a server runtime has.
type loggingRuntime struct{ *recordingRuntime }

func (loggingRuntime) LogPath() string { return "/tmp/runtime.log" }

// TestDockerInspectionReadsTheSandbox: on a real container, logs tails the runtime's log, stats reads
// Docker's figures and the working directory's size, attach names the container's user and workdir;
// a paused sandbox is reported, not started.
func TestDockerInspectionReadsTheSandbox(t *testing.T) {
	f := newDockerFixture(t, dbtest.OpenSQLite(t))
	rts, err := newEnabledSet[runtime.Runtime]("Runtime", loggingRuntime{f.rt}, nil)
	require.NoError(t, err)
	f.fixture.pool.rts = rts
	sink := newCollector()
	submit(t, f.pool, "web:inspect", "e1", "seq 1 100 > /tmp/runtime.log; head -c 200000 /dev/zero > blob; echo ok", sink)
	require.NoError(t, sink.wait(t, 1)[0].Err)

	l, err := f.pool.RuntimeLog(t.Context(), "web:inspect", 3)
	require.NoError(t, err)
	require.Equal(t, "/tmp/runtime.log", l.Path)
	require.Equal(t, "98\n99\n100\n", l.Tail)

	u, err := f.pool.SandboxUsage(t.Context(), "web:inspect")
	require.NoError(t, err)
	require.True(t, u.HasStats)
	require.Positive(t, u.MemoryBytes)
	require.Positive(t, u.PIDs)
	require.GreaterOrEqual(t, u.DiskBytes, int64(200000), "the working directory holds the blob")

	at, err := f.pool.Attach(t.Context(), "web:inspect")
	require.NoError(t, err)
	require.Equal(t, "docker exec -it -u 1000:1000 -w /workspace "+at.SandboxID+" sh", at.Command, "the test image has no bash")

	require.NoError(t, f.pool.Pause(t.Context(), "web:inspect"))
	l, err = f.pool.RuntimeLog(t.Context(), "web:inspect", 3)
	require.NoError(t, err)
	require.False(t, l.Running())
	require.Empty(t, l.Tail)
	u, err = f.pool.SandboxUsage(t.Context(), "web:inspect")
	require.NoError(t, err)
	require.Equal(t, "stopped", u.State, "reported, not started")
	require.Equal(t, at.SandboxID, u.SandboxID)
}
