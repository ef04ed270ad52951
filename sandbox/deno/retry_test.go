package deno_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/deno/denofake"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestRetryAfterPastDeadline: Deno asks for a pause longer than the caller can wait. The provider
// does not ask again before it was told to (which would only add to an overload); it gives up at
// once with the outage, so the caller can wait it out in its own terms.
func TestRetryAfterPastDeadline(t *testing.T) {
	f := denofake.New(t, denofake.Options{Backend: sandboxfake.New(), Image: "unused", Snapshots: []string{baseSnapshot}})
	p := newProvider(t, f, nil)
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		f.Inject(denofake.Fault{Op: denofake.OpListSandboxes, Status: status, Code: "SLOW_DOWN", RetryAfter: 3600})
		calls := f.Calls(denofake.OpListSandboxes)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err := p.List(ctx, map[string]string{sandbox.LabelDeployment: "retry"})
		cancel()
		require.ErrorIs(t, err, sandbox.ErrUnavailable, "status %d", status)
		require.Equal(t, 1, f.Calls(denofake.OpListSandboxes)-calls, "status %d: asked again before Retry-After", status)
		f.Clear(denofake.OpListSandboxes)
	}
}
