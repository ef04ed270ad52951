package agentpool

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
)

// What a collection holds while it reads a file on its own stays within what a reply carries: the
// contents the pass kept are let go as they are passed (here they were all uploaded before), and a
// file the pass gave the digest of is read once the pass is let go. Both held the pass's contents
// (a reply and a file's worth) besides the reply's, twice what reading file by file held.
func TestCollectArtifactsHoldsAReply(t *testing.T) {
	const size = 1 << 20
	lim := ArtifactLimits{MaxFileBytes: size, MaxTurnBytes: 5 * size, MaxCount: 10}
	content := func(p string) string { return strings.Repeat(p[len(p)-1:], size) }
	for _, tc := range []struct {
		name   string
		noSums bool
		old    []string // uploaded before; the pass meets and keeps them first
		new    []string
	}{
		{
			// The pass meets x/ before x-y1 (Docker's archive walks a directory's contents
			// after its name), which come first in path order.
			name: "passed over with digests",
			old:  []string{"x/a1", "x/a2", "x/a3", "x/a4", "x/a5", "x/a6"},
			new:  []string{"x-y1", "x-y2", "x-y3", "x-y4", "x-y5"},
		},
		{
			name:   "without digests",
			noSums: true,
			old:    []string{"a1", "a2", "a3", "a4", "a5", "a6"},
			new:    []string{"b1", "b2", "b3", "b4", "b5"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box := newArtBox()
			box.tree, box.noSums, box.held = true, tc.noSums, &heldBufs{}
			seen := seenArtifacts{}
			for _, p := range tc.old {
				box.put(p, content(p))
				seen[p] = sha256Hex(content(p))
			}
			for _, p := range tc.new {
				box.put(p, content(p))
			}
			found, skipped, err := CollectArtifacts(context.Background(), box, seen, "web:t", lim)
			require.NoError(t, err)
			require.Empty(t, skipped)
			require.Len(t, found, len(tc.new))
			for i, a := range found {
				require.Equal(t, tc.new[i], a.Path)
				require.Equal(t, content(a.Path), string(a.Data))
			}
			require.ElementsMatch(t, tc.new, box.readPaths(), "only the new files, which the pass did not keep, are read")
			require.LessOrEqual(t, box.held.peak, int(lim.MaxTurnBytes),
				"held when a file is read: %d MiB, more than the %d MiB a reply carries", box.held.peak>>20, lim.MaxTurnBytes>>20)
		})
	}
}

// A file the pass passed over, read for the reply after it, may have changed in between: it is
// decided again on what it holds then.
func TestCollectArtifactsChangedAfterThePass(t *testing.T) {
	// The pass keeps a1 and a2 (uploaded before), and gives b's and c's digests: both are read
	// for the reply, after the pass.
	lim := ArtifactLimits{MaxFileBytes: 100, MaxTurnBytes: 100, MaxCount: 10}
	a1, a2, b := strings.Repeat("1", 100), strings.Repeat("2", 100), strings.Repeat("b", 50)
	for _, tc := range []struct {
		name        string
		change      func(box *artBox)
		wantFound   []string // path=content
		wantSkipped []SkippedArtifact
	}{
		{name: "unchanged", change: func(*artBox) {}, wantFound: []string{"b=" + b, "c=c"}},
		{
			name:      "changed",
			change:    func(box *artBox) { box.data["b"] = []byte("new b") },
			wantFound: []string{"b=new b", "c=c"},
		},
		{
			name:      "changed back to what was uploaded",
			change:    func(box *artBox) { box.data["b"] = []byte("old b") },
			wantFound: []string{"c=c"},
		},
		{
			name:        "grew past what the reply has room for",
			change:      func(box *artBox) { box.data["b"] = []byte(strings.Repeat("B", 100)) },
			wantFound:   []string{"c=c"},
			wantSkipped: []SkippedArtifact{{Name: "b", Size: 100, Reason: SkipReplyTooLarge, Limit: 100}},
		},
		{
			name:        "grew past the per-file cap",
			change:      func(box *artBox) { box.data["b"] = []byte(strings.Repeat("B", 101)) },
			wantFound:   []string{"c=c"},
			wantSkipped: []SkippedArtifact{{Name: "b", Size: 101, Reason: SkipFileTooLarge, Limit: 100}},
		},
		{
			name:      "removed",
			change:    func(box *artBox) { delete(box.data, "b") },
			wantFound: []string{"c=c"},
		},
		{
			name:        "swapped for a symlink",
			change:      func(box *artBox) { box.readErr["b"] = fmt.Errorf("read: %w", sandbox.ErrNotRegular) },
			wantFound:   []string{"c=c"},
			wantSkipped: []SkippedArtifact{{Name: "b", Size: 50, Reason: SkipNotRegular}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box := newArtBox().put("a1", a1).put("a2", a2).put("b", b).put("c", "c")
			box.tree, box.afterTree = true, tc.change
			seen := seenArtifacts{"a1": sha256Hex(a1), "a2": sha256Hex(a2), "b": sha256Hex("old b")}
			found, skipped, err := CollectArtifacts(context.Background(), box, seen, "web:t", lim)
			require.NoError(t, err)
			got := []string{}
			for _, f := range found {
				got = append(got, f.Path+"="+string(f.Data))
				require.Equal(t, sha256Hex(string(f.Data)), f.SHA256, f.Path)
				require.Equal(t, int64(len(f.Data)), f.Size, f.Path)
				require.Equal(t, f.Path, f.Name)
			}
			require.Equal(t, tc.wantFound, got)
			require.Equal(t, tc.wantSkipped, skipped)
			require.Equal(t, []string{"b", "c"}, box.readPaths(), "read on their own, after the pass")
		})
	}
}

// heldBufs tracks buffers by weak pointers, to tell how many of their bytes anyone still holds. A
// nil *heldBufs tracks nothing.
type heldBufs struct {
	mu   sync.Mutex // protects the following
	bufs []heldBuf
	// peak is the most bytes held at a measure.
	peak int
}

type heldBuf struct {
	p    weak.Pointer[byte]
	size int
}

// track records b and returns it.
func (h *heldBufs) track(b []byte) []byte {
	if h == nil || len(b) == 0 {
		return b
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bufs = append(h.bufs, heldBuf{weak.Make(&b[0]), len(b)})
	return b
}

// measure collects garbage, then counts the bytes of the tracked buffers still held.
func (h *heldBufs) measure() {
	if h == nil {
		return
	}
	runtime.GC() // a weak pointer is nil once a collection found its buffer unreachable
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, b := range h.bufs {
		if b.p.Value() != nil {
			n += b.size
		}
	}
	h.peak = max(h.peak, n)
}
