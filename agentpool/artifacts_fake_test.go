package agentpool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// artBox is a sandbox.Sandbox holding output/display in memory. It records every read, so tests
// can prove that a file was never read. Its ReadTree is unsupported unless tree is set.
type artBox struct {
	mu      sync.Mutex // protects the following
	entries []sandbox.FileInfo
	data    map[string][]byte
	listErr error
	readErr map[string]error
	reads   []string
	tree    bool
	// stopAt makes ReadTree stop, Partial, at that entry (in the order the pass meets them).
	stopAt string
	// noSums: ReadTree gives no digest of the files it passes over without keeping them.
	noSums bool
	// afterTree, when set, changes the box (locked) once a ReadTree is done.
	afterTree func(*artBox)
	// held, when set, tracks the contents the box hands out.
	held *heldBufs
}

var _ sandbox.Sandbox = (*artBox)(nil)

func newArtBox() *artBox { return &artBox{data: map[string][]byte{}, readErr: map[string]error{}} }

func (b *artBox) put(p, content string) *artBox {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.data[p] = []byte(content)
	for i, e := range b.entries {
		if e.Path == p {
			b.entries[i].Size = int64(len(content))
			return b
		}
	}
	b.entries = append(b.entries, sandbox.FileInfo{Path: p, Size: int64(len(content)), Mode: 0o644})
	return b
}

func (b *artBox) special(p string, mode fs.FileMode) *artBox {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.entries = append(b.entries, sandbox.FileInfo{Path: p, Mode: mode})
	b.data[p] = []byte("root:x:0:0:root:/root:/bin/sh") // what following it would read
	return b
}

func (b *artBox) readPaths() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.reads...)
}

func (b *artBox) Handle() sandbox.Handle { return sandbox.Handle{Provider: "art", ID: "box"} }

func (b *artBox) ListFiles(ctx context.Context, dir string) ([]sandbox.FileInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if dir != ArtifactDir {
		return nil, fmt.Errorf("list %s: %w", dir, fs.ErrNotExist)
	}
	if b.listErr != nil {
		return nil, b.listErr
	}
	// Unsorted on purpose: CollectArtifacts must not rely on the provider's order.
	out := append([]sandbox.FileInfo(nil), b.entries...)
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

func (b *artBox) ReadFile(ctx context.Context, p string, max int64) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rel, ok := strings.CutPrefix(p, ArtifactDir+"/")
	if !ok {
		return nil, fmt.Errorf("read %s outside %s", p, ArtifactDir)
	}
	b.reads = append(b.reads, rel)
	if err := b.readErr[rel]; err != nil {
		return nil, err
	}
	d, ok := b.data[rel]
	if !ok {
		return nil, fmt.Errorf("read %s: %w", p, fs.ErrNotExist)
	}
	if int64(len(d)) > max {
		return nil, fmt.Errorf("read %s: %w", p, sandbox.ErrFileTooLarge)
	}
	b.held.measure()
	return b.held.track(append([]byte(nil), d...)), nil
}

// ReadTree reads the listed regular files while they fit the caps, in the order Docker's archive
// has them (a directory's entries by name, each directory's contents after its name: "x/a" before
// "x-y"), and gives the digest of those within the per-file cap it does not keep, as Docker does.
func (b *artBox) ReadTree(_ context.Context, dir string, lim sandbox.TreeLimits) (sandbox.Tree, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !b.tree:
		return sandbox.Tree{}, sandbox.ErrUnsupported
	case dir != ArtifactDir:
		return sandbox.Tree{}, fmt.Errorf("read tree %s: %w", dir, fs.ErrNotExist)
	case b.listErr != nil:
		return sandbox.Tree{}, b.listErr
	}
	var tree sandbox.Tree
	var total int64
	walk := func(x, y sandbox.FileInfo) int {
		return slices.Compare(strings.Split(x.Path, "/"), strings.Split(y.Path, "/"))
	}
	for _, e := range slices.SortedFunc(slices.Values(b.entries), walk) {
		f := sandbox.TreeFile{FileInfo: e}
		d := b.data[e.Path]
		switch {
		case !e.Mode.IsRegular() || e.Size > lim.MaxFileBytes:
		case total+e.Size <= lim.MaxTotalBytes:
			f.Data, f.Read = b.held.track(append([]byte{}, d...)), true
			total += e.Size
		case !b.noSums:
			sum := sha256.Sum256(d)
			f.SHA256 = hex.EncodeToString(sum[:])
		}
		tree.Files = append(tree.Files, f)
		if e.Path == b.stopAt {
			tree.Partial = true
			break
		}
	}
	slices.SortFunc(tree.Files, func(x, y sandbox.TreeFile) int { return strings.Compare(x.Path, y.Path) })
	if b.afterTree != nil {
		b.afterTree(b)
	}
	return tree, nil
}

func (b *artBox) Exec(context.Context, sandbox.ExecRequest) (sandbox.ExecResult, error) {
	return sandbox.ExecResult{}, sandbox.ErrUnsupported
}

func (b *artBox) WriteFile(context.Context, string, []byte, fs.FileMode) error {
	return sandbox.ErrUnsupported
}

func (b *artBox) Dial(context.Context, int) (net.Conn, error) { return nil, sandbox.ErrUnsupported }

// noArtifacts is an ArtifactStore that has recorded nothing.
type noArtifacts struct{}

func (noArtifacts) ArtifactRecord(context.Context, db.NewArtifact) (db.Artifact, error) {
	return db.Artifact{}, errors.New("not recording")
}

func (noArtifacts) ArtifactLookup(context.Context, string, string, string) (db.Artifact, error) {
	return db.Artifact{}, db.ErrNotFound
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func names(as []Artifact) []string {
	out := []string{}
	for _, a := range as {
		out = append(out, a.Path+"="+a.Name)
	}
	return out
}

// clone copies the box, so that each mode of a table test starts from the same one.
func (b *artBox) clone() *artBox {
	b.mu.Lock()
	defer b.mu.Unlock()
	return &artBox{entries: slices.Clone(b.entries), data: maps.Clone(b.data), listErr: b.listErr,
		readErr: maps.Clone(b.readErr), tree: b.tree, stopAt: b.stopAt, noSums: b.noSums, afterTree: b.afterTree}
}

// stallingBox is a sandbox whose file listing never answers (a daemon that stopped sending).
type stallingBox struct{ *artBox }

func (stallingBox) ReadTree(ctx context.Context, _ string, _ sandbox.TreeLimits) (sandbox.Tree, error) {
	<-ctx.Done()
	return sandbox.Tree{}, fmt.Errorf("read tree: %w", ctx.Err())
}
