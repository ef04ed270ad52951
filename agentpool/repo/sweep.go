package repo

import (
	"os"
	"path/filepath"
	"strings"
	"time"
)

// sweepAge is how old a temporary copy in the cache must be before New removes it: far longer than
// any push or checkout runs, so a process sharing the cache (another replica) never loses one it is
// still using.
const sweepAge = 24 * time.Hour

// tempPrefixes name what Push, Prepare and sync leave in the cache while they run.
var tempPrefixes = []string{".bundle-", ".push-", ".work-", ".clone-"}

// sweep removes the temporary copies a process killed mid-operation left in the cache: a bundle
// (up to MaxBundle), a quarantine, a work copy or a half clone each time, which nothing else would
// ever remove. The bundles, quarantines and work copies are at the top; half clones sit beside the
// repositories (host/owner/.clone-*).
func sweep(cacheDir string, now time.Time) {
	dirs, _ := filepath.Glob(filepath.Join(cacheDir, "*", "*"))
	for _, dir := range append([]string{cacheDir}, dirs...) {
		if rel, _ := filepath.Rel(cacheDir, dir); isTemp(rel) {
			continue // inside a temporary copy (.work-*/…): the repository's own files
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !isTemp(e.Name()) {
				continue
			}
			info, err := e.Info()
			if err != nil || now.Sub(info.ModTime()) < sweepAge {
				continue
			}
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

func isTemp(name string) bool {
	for _, p := range tempPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
