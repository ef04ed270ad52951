package docker

import (
	"archive/tar"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/threadbox/threadbox/sandbox"
)

var _ sandbox.TreeReader = (*Provider)(nil)

// ReadTree implements sandbox.TreeReader with one archive of dir, read once: the archive carries
// every file's contents anyway, so the files within the caps are kept as they pass and the others
// are read past (into io.Discard, never buffered). Besides meta, that is a stat per directory
// between the work directory and dir (walkParents) and one archive, whatever the number of files,
// where ListFiles and a ReadFile per file took about three calls per file.
//
// Reading past a file costs its size in transfer: a 2 GiB file (sparse files cost nothing to make,
// and the daemon sends their holes as zeros) takes some ten seconds from a local daemon, and a
// remote one is slower. There is no listing that skips contents: the archive endpoint has no
// excludes, a stat names one path, and an exec needs a running sandbox and tools the image may not
// have (minimal images have no find -printf). So what is read past is bounded, by MaxSkipBytes for
// files over the per-file cap and by MaxPassBytes for the others: at a file that would pass its
// bound, the archive is dropped (the daemon stops sending) and the tree is Partial, listing that
// file but nothing after it.
func (p *Provider) ReadTree(ctx context.Context, h sandbox.Handle, dir string, lim sandbox.TreeLimits) (sandbox.Tree, error) {
	lim = lim.WithDefaults()
	st, err := p.meta(ctx, h)
	if err != nil {
		return sandbox.Tree{}, err
	}
	abs, err := st.resolve(dir)
	if err != nil {
		return sandbox.Tree{}, err
	}
	if _, _, err := p.walkParents(ctx, h.ID, st, path.Dir(abs), false); err != nil {
		return sandbox.Tree{}, err
	}
	return retryShort(ctx, func() (sandbox.Tree, error) { return p.readTreeOnce(ctx, h.ID, abs, lim) })
}

// Bounds on what the daemon's archive may hold besides contents. Names come from the sandbox's
// files, which the agent names, and the archive from a daemon that may be remote: neither is trusted.
const (
	// maxTreeName bounds an entry's name in the archive (PATH_MAX: no file the sandbox can open
	// has a longer path).
	maxTreeName = 4096
	// maxTreeHeaderBytes bounds an entry's headers (its tar header, long-name and PAX records,
	// padding), well above what a name at maxTreeName and a few extended attributes take.
	maxTreeHeaderBytes = 16 << 10
)

// errArchiveTooLong ends a read of an archive longer than its entries and caps allow.
var errArchiveTooLong = fmt.Errorf("archive longer than its entries and caps allow: %w", sandbox.ErrTooLarge)

func (p *Provider) readTreeOnce(ctx context.Context, id, abs string, lim sandbox.TreeLimits) (sandbox.Tree, error) {
	rc, stat, err := p.cli.CopyFromContainer(ctx, id, abs)
	if err != nil {
		return sandbox.Tree{}, p.wrapPathErr(ctx, id, "read tree", abs, err)
	}
	// Closing an archive not read to its end drops the connection: the daemon stops sending.
	defer rc.Close()
	if !stat.Mode.IsDir() {
		return sandbox.Tree{}, fmt.Errorf("read tree %s: mode %s, not a directory: %w", abs, stat.Mode, sandbox.ErrNotRegular)
	}
	t := newTreeReader(lim, path.Base(abs))
	if err := t.read(rc); err != nil {
		return sandbox.Tree{}, fmt.Errorf("read tree %s: %w", abs, err)
	}
	return t.tree, nil
}

// treeReader builds a Tree from an archive's entries.
type treeReader struct {
	lim  sandbox.TreeLimits
	base string // the archive's entries are rebased on the directory's own name
	tree sandbox.Tree
	// byName indexes entries by their name in the archive, for hard links.
	byName map[string]int
	// sums holds the digests of kept files that hard links past the total needed, by index: one
	// hash per file, not per link (10,000 links to a 10 MiB file were 100 GB to hash).
	sums map[int]string
	// kept, skipped and passed count the contents kept, read past over the per-file cap, and read
	// past within it (hashed), against MaxTotalBytes, MaxSkipBytes and MaxPassBytes.
	kept, skipped, passed int64
	// hashed counts the bytes hashed: no more than what was read past plus what was kept.
	hashed int64
}

func newTreeReader(lim sandbox.TreeLimits, base string) *treeReader {
	return &treeReader{lim: lim, base: base, byName: map[string]int{}, sums: map[int]string{}}
}

// read reads the archive of the directory from r into t.tree.
func (t *treeReader) read(r io.Reader) error {
	// Everything read is bounded: the contents kept, those read past, and the headers of at most
	// MaxListEntries entries (and the directory's own).
	body := &boundedReader{r: r, n: t.lim.MaxTotalBytes + t.lim.MaxSkipBytes + t.lim.MaxPassBytes + (sandbox.MaxListEntries+2)*maxTreeHeaderBytes}
	tr := tar.NewReader(body)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("archive: %w", err)
		}
		stop, err := t.add(hdr, tr)
		if err != nil {
			return err
		}
		if stop {
			t.tree.Partial = true
			break
		}
	}
	sort.Slice(t.tree.Files, func(i, j int) bool { return t.tree.Files[i].Path < t.tree.Files[j].Path })
	return nil
}

// add adds hdr's entry, reading its contents from r when they are kept. It reports stop when the
// entry is a file to read past that would take the bytes read past beyond MaxSkipBytes (over the
// per-file cap) or MaxPassBytes (within it).
func (t *treeReader) add(hdr *tar.Header, r io.Reader) (stop bool, err error) {
	rel, err := t.rel(hdr.Name)
	if err != nil || rel == "" {
		return false, err
	}
	if len(t.tree.Files) == sandbox.MaxListEntries {
		return false, fmt.Errorf("more than %d entries: %w", sandbox.MaxListEntries, sandbox.ErrTooLarge)
	}
	f := sandbox.TreeFile{FileInfo: sandbox.FileInfo{Path: rel, Mode: hdr.FileInfo().Mode(), ModTime: hdr.ModTime.UTC()}}
	switch hdr.Typeflag {
	case tar.TypeReg:
		f.Size = hdr.Size
		if t.fits(f.Size) {
			f.Data = make([]byte, f.Size)
			if _, err := io.ReadFull(r, f.Data); err != nil {
				return false, fmt.Errorf("%s: %w", rel, noEOF(err))
			}
			f.Read = true
			t.kept += f.Size
		} else if f.Size > t.lim.MaxFileBytes {
			// Read past for nothing (it is never kept): within MaxSkipBytes. (Compared so, not
			// summed: a size near 2^63, a sparse file on XFS, would overflow the sum.)
			if f.Size > t.lim.MaxSkipBytes-t.skipped {
				stop = true // not read past: the archive is dropped instead
			} else {
				t.skipped += f.Size
			}
		} else if f.Size > t.lim.MaxPassBytes-t.passed {
			stop = true
		} else {
			// Passed over, within MaxPassBytes: its digest costs no transfer, and spares the caller
			// reading an unchanged file again.
			t.passed += f.Size
			h := sha256.New()
			n, err := io.Copy(h, r)
			t.hashed += n
			if err != nil || n != f.Size {
				return false, fmt.Errorf("%s: %w", rel, noEOF(cmp.Or(err, io.ErrUnexpectedEOF)))
			}
			f.SHA256 = hex.EncodeToString(h.Sum(nil))
		}
	case tar.TypeLink:
		// A file with several names is sent in full once, then as links to that (earlier) entry.
		if i, ok := t.byName[strings.TrimSuffix(hdr.Linkname, "/")]; ok {
			target := t.tree.Files[i]
			f.Size = target.Size
			switch {
			case target.Read && t.fits(f.Size):
				f.Data, f.Read = target.Data, true
				t.kept += f.Size
			case target.Read:
				if _, ok := t.sums[i]; !ok {
					sum := sha256.Sum256(target.Data)
					t.sums[i], t.hashed = hex.EncodeToString(sum[:]), t.hashed+target.Size
				}
				f.SHA256 = t.sums[i]
			default:
				f.SHA256 = target.SHA256
			}
		}
	}
	t.byName[strings.TrimSuffix(hdr.Name, "/")] = len(t.tree.Files)
	t.tree.Files = append(t.tree.Files, f)
	return stop, nil
}

// fits reports whether a file of size bytes is kept.
func (t *treeReader) fits(size int64) bool {
	return size <= t.lim.MaxFileBytes && t.kept+size <= t.lim.MaxTotalBytes
}

// rel returns name relative to the directory read ("" for the directory itself), refusing a name
// no archive of a directory holds: absolute, with empty, . or .. elements, outside the directory,
// with a NUL, or longer than maxTreeName.
func (t *treeReader) rel(name string) (string, error) {
	if len(name) > maxTreeName {
		return "", fmt.Errorf("archive entry name of %d bytes, more than %d: %w", len(name), maxTreeName, sandbox.ErrTooLarge)
	}
	clean := strings.TrimSuffix(name, "/")
	parts := strings.Split(clean, "/")
	bad := strings.IndexByte(name, 0) >= 0 || parts[0] != t.base
	for _, part := range parts {
		bad = bad || part == "" || part == "." || part == ".."
	}
	if bad {
		return "", fmt.Errorf("archive entry %q is not below %s", name, t.base)
	}
	return strings.Join(parts[1:], "/"), nil
}

// noEOF reports an archive that ended inside a file as cut short (retryShort reads it again).
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// boundedReader reads at most n bytes from r, then fails with errArchiveTooLong.
type boundedReader struct {
	r io.Reader
	n int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, errArchiveTooLong
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	return n, err
}
