package sandbox

import (
	"cmp"
	"context"
)

// TreeReader is an optional capability: list a directory tree and read its regular files in one
// pass. It is for providers whose listing carries the contents anyway (Docker's archive endpoint
// sends every file to list its name), where ListFiles followed by a ReadFile per file costs the
// tree's contents once to list and again, a call or more per file, to read.
//
// It keeps ListFiles' contract: entries relative to dir, recursively, symlinks (and devices, …)
// reported as such and never followed, dir itself being a symlink refused with ErrNotRegular, a
// missing dir wrapping fs.ErrNotExist, more than MaxListEntries entries refused with ErrTooLarge
// having kept no more than that. On top of it, the regular files within lim are read (TreeFile.Read).
type TreeReader interface {
	ReadTree(ctx context.Context, h Handle, dir string, lim TreeLimits) (Tree, error)
}

// TreeLimits bounds one ReadTree. Zero fields take the defaults.
type TreeLimits struct {
	// MaxFileBytes: a regular file larger than this is listed with its size and not read (default
	// DefaultMaxOutput).
	MaxFileBytes int64
	// MaxTotalBytes bounds the contents returned together: a file that would take them past it is
	// listed and not read (default 4 × DefaultMaxOutput). Which files are read when it binds is the
	// provider's choice; the caller reads the others itself if it needs them.
	MaxTotalBytes int64
	// MaxSkipBytes bounds the contents of files over MaxFileBytes a provider may transfer and throw
	// away to reach the entries after them, as Docker's archive stream makes it do (default
	// DefaultMaxTreeSkip). A provider that would pass it stops there and answers Tree.Partial.
	MaxSkipBytes int64
	// MaxPassBytes bounds, likewise, the contents of files within MaxFileBytes that a provider passes
	// over without keeping them (past MaxTotalBytes), taking their digest (default
	// DefaultMaxTreePass). Apart from MaxSkipBytes, and larger: those files may be what the caller
	// wants (new files among a long thread's old ones), where files over the cap never are.
	MaxPassBytes int64
}

// DefaultMaxTreeSkip is TreeLimits.MaxSkipBytes' default: about a second of transfer from a local
// Docker daemon.
const DefaultMaxTreeSkip = 256 << 20

// DefaultMaxTreePass is TreeLimits.MaxPassBytes' default: some ten seconds of transfer from a local
// Docker daemon, what reading such files one by one took for a few hundred MiB.
const DefaultMaxTreePass = 2 << 30

// WithDefaults fills the zero (or negative) fields.
func (l TreeLimits) WithDefaults() TreeLimits {
	l.MaxFileBytes = cmp.Or(max(l.MaxFileBytes, 0), DefaultMaxOutput)
	l.MaxTotalBytes = cmp.Or(max(l.MaxTotalBytes, 0), 4*DefaultMaxOutput)
	l.MaxSkipBytes = cmp.Or(max(l.MaxSkipBytes, 0), DefaultMaxTreeSkip)
	l.MaxPassBytes = cmp.Or(max(l.MaxPassBytes, 0), DefaultMaxTreePass)
	return l
}

// Tree is what ReadTree found.
type Tree struct {
	// Files are the entries below dir, sorted by Path.
	Files []TreeFile
	// Partial: the provider stopped before the end of the tree, because going on meant transferring
	// more than MaxSkipBytes it would throw away (a file of gigabytes), or passing over more than
	// MaxPassBytes. Files holds the entries it
	// met, each as complete as otherwise, including the file it stopped at; the entries after it are
	// missing, and nothing says how many there are.
	Partial bool
}

// TreeFile is one entry of a Tree.
type TreeFile struct {
	FileInfo
	// Read: Data holds the whole file. Only regular files are read, never one over
	// TreeLimits.MaxFileBytes.
	Read bool
	// Data is the file's content when Read is set (it may be shared with another entry that is a
	// hard link to the same file), nil otherwise.
	Data []byte
	// SHA256, when not empty, is the hex sha256 of a regular file within MaxFileBytes that the
	// provider passed over whole without keeping it (past MaxTotalBytes): a caller that only needs
	// the files it has not seen before can tell an unchanged one without reading it again. Providers
	// may leave it empty.
	SHA256 string
}
