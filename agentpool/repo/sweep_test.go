package repo

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A bot killed in the middle of a push or a checkout leaves its temporary copies in the cache (a
// bundle of up to MaxBundle, a quarantine, a work copy, a half clone): the next start removes the
// ones old enough that no process sharing the cache can still be using them, and keeps the rest.
func TestNewSweepsLeftoversOfADeadProcess(t *testing.T) {
	cache := t.TempDir()
	old := time.Now().Add(-2 * sweepAge)
	mk := func(rel string, dir bool, mtime time.Time) string {
		p := filepath.Join(cache, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		if dir {
			require.NoError(t, os.MkdirAll(filepath.Join(p, "objects"), 0o755))
		} else {
			require.NoError(t, os.WriteFile(p, []byte("x"), 0o600))
		}
		require.NoError(t, os.Chtimes(p, mtime, mtime))
		return p
	}
	gone := []string{
		mk(".bundle-1", false, old), mk(".work-1", true, old), mk(".push-1", true, old),
		mk("github.com/acme/.clone-1", true, old),
	}
	kept := []string{
		mk(".bundle-2", false, time.Now()), mk(".work-2", true, time.Now()),
		mk("github.com/acme/app.git", true, old), mk("github.com/acme/.clone-2", true, time.Now()),
	}
	_, err := New(Config{CacheDir: cache})
	require.NoError(t, err)
	for _, p := range gone {
		require.NoFileExists(t, p)
		require.NoDirExists(t, p)
	}
	for _, p := range kept {
		_, err := os.Stat(p)
		require.NoError(t, err, p)
	}
}
