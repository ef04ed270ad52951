package agentpool

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// ArtifactDir is where the agent puts files meant for the user, relative to the work directory.
const ArtifactDir = "output/display"

// ArtifactLimits caps what one turn uploads (DESIGN §7). Zero fields take the defaults.
type ArtifactLimits struct {
	// MaxFileBytes is the largest file uploaded (default 10 MiB, Discord's upload limit).
	MaxFileBytes int64
	// MaxTurnBytes bounds the files of one turn together (default 50 MiB).
	MaxTurnBytes int64
	// MaxCount is the most files one turn uploads (default 10, Discord's per-message limit).
	MaxCount int
	// MaxNameLen caps a display name, in characters, extension included (default 120).
	MaxNameLen int
}

// Artifact defaults.
const (
	DefaultArtifactMaxFileBytes = 10 << 20
	DefaultArtifactMaxTurnBytes = 50 << 20
	DefaultArtifactMaxCount     = 10
	DefaultArtifactMaxNameLen   = 120
)

// maxArtifactEntries bounds how many files one collection reads and hashes: an agent that writes
// thousands of files must not turn every reply into thousands of reads.
const maxArtifactEntries = 1000

// What one collection reads past on a provider whose listing carries contents (Docker):
// ArtifactSkipBytes of files over the per-file cap (never uploaded: about a second from a local
// daemon), and ArtifactPassBytes of the others it does not keep (a long thread's old files, told
// unchanged by their digests, among which new ones may be). A directory holding more than that is
// collected up to there (Tree.Partial), and the reply says so.
const (
	ArtifactSkipBytes = sandbox.DefaultMaxTreeSkip
	ArtifactPassBytes = sandbox.DefaultMaxTreePass
)

// maxSkippedListed bounds the skipped files listed one by one (each is a line of the reply); the
// rest are counted in one SkipMore entry.
const maxSkippedListed = 20

// minNameLen leaves room for a stem, a de-duplicating suffix and an extension.
const minNameLen = 16

func (l ArtifactLimits) withDefaults() ArtifactLimits {
	l.MaxFileBytes = cmp.Or(l.MaxFileBytes, DefaultArtifactMaxFileBytes)
	l.MaxTurnBytes = cmp.Or(l.MaxTurnBytes, DefaultArtifactMaxTurnBytes)
	l.MaxCount = cmp.Or(l.MaxCount, DefaultArtifactMaxCount)
	l.MaxNameLen = cmp.Or(l.MaxNameLen, DefaultArtifactMaxNameLen)
	return l
}

func (l ArtifactLimits) validate() error {
	switch {
	case l.MaxFileBytes <= 0:
		return fmt.Errorf("agentpool: artifacts MaxFileBytes = %d: must be positive", l.MaxFileBytes)
	case l.MaxTurnBytes < l.MaxFileBytes:
		return fmt.Errorf("agentpool: artifacts MaxTurnBytes = %d: must be at least MaxFileBytes (%d)", l.MaxTurnBytes, l.MaxFileBytes)
	case l.MaxCount <= 0:
		return fmt.Errorf("agentpool: artifacts MaxCount = %d: must be positive", l.MaxCount)
	case l.MaxNameLen < minNameLen:
		return fmt.Errorf("agentpool: artifacts MaxNameLen = %d: must be at least %d", l.MaxNameLen, minNameLen)
	}
	return nil
}

// Artifact is a new or changed file to upload.
type Artifact struct {
	// Path is relative to output/display, as listed (the key under which uploads are remembered).
	Path string
	// Name is the sanitized display name, unique within the turn.
	Name   string
	Data   []byte
	Size   int64
	SHA256 string
}

// SkippedArtifact is a file that was not uploaded; the reply lists it, so nothing is dropped silently.
// It says why as a SkipReason and the bound that was broken; the bot words it (DESIGN §10: no
// presentation text in the domain).
type SkippedArtifact struct {
	// Name is the sanitized display name.
	Name   string
	Size   int64
	Reason SkipReason
	// Limit is the bound the file broke: bytes for the size reasons, files for SkipTooMany and
	// SkipUnchecked.
	Limit int64
	// Count is how many files a SkipUnchecked entry stands for.
	Count int
}

// SkipReason says why a file was not uploaded.
type SkipReason string

const (
	// SkipNotDirectory: output/display itself is a symlink or a file, so nothing under it is trusted.
	SkipNotDirectory SkipReason = "not_directory"
	// SkipNotRegular: a symlink, device or the like; never read.
	SkipNotRegular SkipReason = "not_regular"
	// SkipFileTooLarge: over Limit bytes (the per-file cap, or the platform's upload limit).
	SkipFileTooLarge SkipReason = "file_too_large"
	// SkipTooMany: the reply already has Limit files.
	SkipTooMany SkipReason = "too_many"
	// SkipReplyTooLarge: the reply's files would exceed Limit bytes.
	SkipReplyTooLarge SkipReason = "reply_too_large"
	// SkipUnchecked: output/display holds more than Limit files; Count more were not looked at.
	SkipUnchecked SkipReason = "unchecked"
	// SkipUnreadable: output/display (the error is logged, not shown), or one file under it, could
	// not be read.
	SkipUnreadable SkipReason = "unreadable"
	// SkipUnreached: output/display holds more than one collection reads past (Limit bytes of files
	// over the per-file cap, or ArtifactPassBytes of others), and the files after them were not
	// looked at; how many there are is not known.
	SkipUnreached SkipReason = "unreached"
	// SkipMore: Count more files were not uploaded, for the reasons above, past the Limit listed.
	SkipMore SkipReason = "more"
)

// CollectArtifacts returns the regular files under output/display that are new or changed since the
// thread last uploaded them (by path and sha256), within lim, in path order; and what it skipped, with
// why. An unchanged file is neither returned nor listed as skipped: it was uploaded before.
//
// Symlinks, devices and other non-regular entries are skipped unread: they could point anywhere in
// the sandbox (output/display/passwd -> /etc/passwd), and the provider never follows them. A file
// over MaxFileBytes is skipped on its listed size, without reading it. A missing output/display means
// nothing to upload. A file that cannot be read is skipped (SkipUnreadable); only a failure of the
// sandbox as a whole (gone, stopped, its service out, ctx ended) is an error.
//
// Where the provider can (sandbox.TreeReader), the directory is listed and its files read in one
// pass; otherwise each file is read on its own. A file the pass passed over, giving its digest, is
// decided on that digest and its listed size, and read only if the reply takes it, after the pass:
// the pass's contents are let go as they are decided on, unless the reply takes them, so that
// reading more never holds them besides the reply's.
//
// Uploads are not recorded here: call RecordArtifacts once the platform confirmed them.
func CollectArtifacts(ctx context.Context, sb sandbox.Sandbox, store db.ArtifactStore, threadKey string, lim ArtifactLimits) (found []Artifact, skipped []SkippedArtifact, err error) {
	lim = lim.withDefaults()
	if err := lim.validate(); err != nil {
		return nil, nil, err
	}
	tree, err := readArtifactTree(ctx, sb, lim)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil, nil
	case errors.Is(err, sandbox.ErrNotRegular):
		// output/display (or output) is itself a symlink or a file: nothing under it is trusted.
		return nil, []SkippedArtifact{{Name: ArtifactDir, Reason: SkipNotDirectory}}, nil
	case errors.Is(err, sandbox.ErrTooLarge):
		// The provider refused to list more than sandbox.MaxListEntries entries: say so, upload none.
		return nil, []SkippedArtifact{{Name: ArtifactDir, Reason: SkipUnchecked, Limit: sandbox.MaxListEntries}}, nil
	case err != nil:
		return nil, nil, fmt.Errorf("agentpool: list %s: %w", ArtifactDir, err)
	}
	c := &collection{ctx: ctx, sb: sb, store: store, threadKey: threadKey, lim: lim}
	if err := c.collect(tree.Files); err != nil {
		return nil, nil, err
	}
	if tree.Partial {
		c.skipped = append(c.skipped, SkippedArtifact{Name: ArtifactDir, Reason: SkipUnreached, Limit: ArtifactSkipBytes})
	}
	if c.more > 0 {
		c.skipped = append(c.skipped, SkippedArtifact{Reason: SkipMore, Count: c.more, Limit: maxSkippedListed})
	}
	return c.found, c.skipped, nil
}

// collection is one CollectArtifacts under way.
type collection struct {
	ctx       context.Context
	sb        sandbox.Sandbox
	store     db.ArtifactStore
	threadKey string
	lim       ArtifactLimits

	found []Artifact
	// unread[i]: found[i] is still to be read (its Data is nil): the pass passed over it, giving
	// its digest.
	unread  []bool
	total   int64 // the bytes of found
	skipped []SkippedArtifact
	more    int // skipped files past maxSkippedListed
}

// collect decides on each entry in path order, then reads the files the reply takes that the pass
// did not keep, and names the reply's files. It takes entries over: each entry's Data is let go once
// passed, unless the reply takes it.
func (c *collection) collect(entries []sandbox.TreeFile) error {
	slices.SortFunc(entries, func(a, b sandbox.TreeFile) int { return strings.Compare(a.Path, b.Path) })
	checked := 0
	for i := range entries {
		// What the pass kept is held from here by e, then by found if the reply takes it.
		e := entries[i]
		entries[i].Data = nil
		if e.Mode.IsDir() {
			continue
		}
		name := sanitizeName(e.Path, c.lim.MaxNameLen)
		if !e.Mode.IsRegular() {
			c.skip(name, e.Size, SkipNotRegular, 0)
			continue
		}
		if e.Size > c.lim.MaxFileBytes {
			c.skip(name, e.Size, SkipFileTooLarge, c.lim.MaxFileBytes)
			continue
		}
		if checked == maxArtifactEntries {
			c.skipped = append(c.skipped, SkippedArtifact{Reason: SkipUnchecked, Limit: maxArtifactEntries, Count: countRegular(entries[i:])})
			break
		}
		checked++
		a := Artifact{Path: e.Path, Data: e.Data, Size: e.Size, SHA256: e.SHA256}
		unread := !e.Read && e.SHA256 != ""
		if !e.Read && !unread {
			// Neither kept nor digested: read now, to know whether it changed.
			data, ok, err := c.read(a.Path, name, e.Size)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			a.Data, a.Size = data, int64(len(data))
		}
		if !unread {
			sum := sha256.Sum256(a.Data)
			a.SHA256 = hex.EncodeToString(sum[:])
		}
		seen, err := c.uploaded(a)
		if err != nil {
			return err
		}
		if !seen && c.fits(a, name) {
			c.total += a.Size
			c.found, c.unread = append(c.found, a), append(c.unread, unread)
		}
	}
	// The pass's contents are let go (entries' Data are nil but the reply's): read the rest.
	if err := c.readUnread(); err != nil {
		return err
	}
	names := map[string]int{}
	for i := range c.found {
		c.found[i].Name = uniqueNameLen(sanitizeName(c.found[i].Path, c.lim.MaxNameLen), names, c.lim.MaxNameLen)
	}
	return nil
}

// readUnread reads the files the reply takes that the pass did not keep. One changed since the pass
// is decided again on what it holds now; one gone, or no longer readable, leaves the reply.
func (c *collection) readUnread() error {
	found := c.found[:0]
	for i, a := range c.found {
		if !c.unread[i] {
			found = append(found, a)
			continue
		}
		c.total -= a.Size
		name := sanitizeName(a.Path, c.lim.MaxNameLen)
		data, ok, err := c.read(a.Path, name, a.Size)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		sum := sha256.Sum256(data)
		if h := hex.EncodeToString(sum[:]); h != a.SHA256 {
			a.SHA256, a.Size = h, int64(len(data))
			seen, err := c.uploaded(a)
			switch {
			case err != nil:
				return err
			case seen:
				continue
			case c.total+a.Size > c.lim.MaxTurnBytes:
				c.skip(name, a.Size, SkipReplyTooLarge, c.lim.MaxTurnBytes)
				continue
			}
		}
		a.Data = data
		c.total += a.Size
		found = append(found, a)
	}
	c.found, c.unread = found, nil
	return nil
}

// read reads one file on its own. ok is false when it is not uploaded: gone since it was listed, or
// skipped (recorded). An error is a failure of the sandbox as a whole.
func (c *collection) read(rel, name string, size int64) (data []byte, ok bool, err error) {
	data, err = c.sb.ReadFile(c.ctx, ArtifactDir+"/"+rel, c.lim.MaxFileBytes)
	switch {
	case err == nil:
		return data, true, nil
	case errors.Is(err, fs.ErrNotExist):
		// Removed since the listing.
	case errors.Is(err, sandbox.ErrNotRegular):
		c.skip(name, size, SkipNotRegular, 0)
	case errors.Is(err, sandbox.ErrFileTooLarge):
		// It grew since the listing.
		c.skip(name, max(size, c.lim.MaxFileBytes+1), SkipFileTooLarge, c.lim.MaxFileBytes)
	case sandboxWide(c.ctx, err):
		return nil, false, fmt.Errorf("agentpool: read %s/%s: %w", ArtifactDir, rel, err)
	default:
		// The file's own failure (the agent named it so deep that the daemon cannot open it,
		// say): it costs this file, not the others.
		c.skip(name, size, SkipUnreadable, 0)
	}
	return nil, false, nil
}

// uploaded reports whether the thread uploaded a's path with a's content before.
func (c *collection) uploaded(a Artifact) (bool, error) {
	_, err := c.store.ArtifactLookup(c.ctx, c.threadKey, a.Path, a.SHA256)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, db.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("agentpool: artifact %s: %w", a.Path, err)
}

// fits reports whether the reply takes a, recording it skipped if not.
func (c *collection) fits(a Artifact, name string) bool {
	switch {
	case len(c.found) >= c.lim.MaxCount:
		c.skip(name, a.Size, SkipTooMany, int64(c.lim.MaxCount))
	case c.total+a.Size > c.lim.MaxTurnBytes:
		c.skip(name, a.Size, SkipReplyTooLarge, c.lim.MaxTurnBytes)
	default:
		return true
	}
	return false
}

// skip records a file not uploaded: listed up to maxSkippedListed, counted past that.
func (c *collection) skip(name string, size int64, reason SkipReason, limit int64) {
	if len(c.skipped) >= maxSkippedListed {
		c.more++
		return
	}
	c.skipped = append(c.skipped, SkippedArtifact{Name: name, Size: size, Reason: reason, Limit: limit})
}

// sandboxWide reports whether a failed read says nothing more can be read this time: the sandbox
// is gone or stopped, its service is out, or ctx ended.
func sandboxWide(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrNotRunning) ||
		errors.Is(err, sandbox.ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// readArtifactTree lists output/display and reads its files in one pass where the sandbox can, or
// lists it alone (no file read: each is read on its own). The pass keeps up to what a reply may
// carry plus one file, as much as reading files one by one held at most; CollectArtifacts lets go
// of it before reading more.
func readArtifactTree(ctx context.Context, sb sandbox.Sandbox, lim ArtifactLimits) (sandbox.Tree, error) {
	tree, err := sb.ReadTree(ctx, ArtifactDir, sandbox.TreeLimits{
		MaxFileBytes: lim.MaxFileBytes, MaxTotalBytes: lim.MaxTurnBytes + lim.MaxFileBytes, MaxSkipBytes: ArtifactSkipBytes, MaxPassBytes: ArtifactPassBytes,
	})
	if !errors.Is(err, sandbox.ErrUnsupported) {
		return tree, err
	}
	list, err := sb.ListFiles(ctx, ArtifactDir)
	if err != nil {
		return sandbox.Tree{}, err
	}
	tree.Files = make([]sandbox.TreeFile, len(list))
	for i, fi := range list {
		tree.Files[i] = sandbox.TreeFile{FileInfo: fi}
	}
	return tree, nil
}

func countRegular(es []sandbox.TreeFile) int {
	n := 0
	for _, e := range es {
		if e.Mode.IsRegular() {
			n++
		}
	}
	return n
}

// RecordArtifacts remembers the uploads the platform confirmed: fileIDs[i] is the platform's id for
// uploaded[i], "" where that upload failed (it is not recorded, so the next turn offers it again).
// It records what it can and reports every failure.
func RecordArtifacts(ctx context.Context, store db.ArtifactStore, turnID int64, uploaded []Artifact, fileIDs []string) error {
	var errs []error
	for i, a := range uploaded {
		if i >= len(fileIDs) || fileIDs[i] == "" {
			continue
		}
		if _, err := store.ArtifactRecord(ctx, db.NewArtifact{
			TurnID: turnID, Path: a.Path, SHA256: a.SHA256, Size: a.Size, PlatformFileID: fileIDs[i],
		}); err != nil {
			errs = append(errs, fmt.Errorf("agentpool: record artifact %s: %w", a.Path, err))
		}
	}
	return errors.Join(errs...)
}

// SanitizeName makes a display name out of a file name from the sandbox, which the agent (and so
// whoever prompts it) controls. It keeps the base name only (no ../ or directories, with / or \),
// drops control characters and invisible formatting characters (bidi overrides that would show
// "exe.pdf" for "fdp.exe", zero-width characters), replaces characters that are invalid in file
// names on common systems, collapses whitespace, trims leading dots and dashes (no hidden files, no
// names read as options), and caps the length at DefaultArtifactMaxNameLen characters, keeping the
// extension. An empty result becomes "file".
func SanitizeName(name string) string { return sanitizeName(name, DefaultArtifactMaxNameLen) }

func sanitizeName(name string, maxLen int) string {
	name = strings.ToValidUTF8(name, "")
	name = strings.ReplaceAll(name, `\`, "/")
	name = name[strings.LastIndexByte(name, '/')+1:]

	var b strings.Builder
	space := false
	for _, r := range name {
		switch {
		case unicode.IsSpace(r):
			space = true
			continue
		case unicode.IsControl(r), unicode.Is(unicode.Cf, r), r == utf8.RuneError:
			continue
		case strings.ContainsRune(`<>:"|?*`, r):
			r = '_'
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	name = strings.TrimLeft(b.String(), ".- ")
	name = strings.TrimRight(name, ". ")
	if name == "" {
		return "file"
	}
	stem, ext := splitExt(name)
	return capName(stem, "", ext, maxLen)
}

// splitExt splits off a short extension. A long "extension" is part of the name: keeping 100
// characters after a dot would defeat the length cap.
func splitExt(name string) (stem, ext string) {
	ext = path.Ext(name)
	if ext == name || utf8.RuneCountInString(ext) > 16 {
		return name, ""
	}
	return strings.TrimSuffix(name, ext), ext
}

// capName joins stem, a de-duplicating tag ("-2", or "") and ext, cutting the stem so that the whole
// fits maxLen characters. An extension that would leave no room for the stem becomes part of it (and
// is cut with it) rather than the tag, which must survive for the name to stay unique. maxLen must
// exceed the tag's length.
func capName(stem, tag, ext string, maxLen int) string {
	tagN, extN := utf8.RuneCountInString(tag), utf8.RuneCountInString(ext)
	if tagN+extN >= maxLen {
		stem, ext, extN = stem+ext, "", 0
	}
	keep := maxLen - tagN - extN
	if utf8.RuneCountInString(stem) > keep {
		stem = strings.TrimRight(firstRunes(stem, keep), ". ")
	}
	if stem == "" {
		stem = firstRunes("file", keep)
	}
	return stem + tag + ext
}

// firstRunes returns s's first n runes.
func firstRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

// uniqueName returns name, or name-2, name-3, … (before the extension) if used already has it, and
// marks the result used. used counts per requested name, so many duplicates stay cheap.
func uniqueName(name string, used map[string]int) string {
	return uniqueNameLen(name, used, DefaultArtifactMaxNameLen)
}

func uniqueNameLen(name string, used map[string]int, maxLen int) string {
	out := name
	if used[name] > 0 {
		stem, ext := splitExt(name)
		for n := used[name] + 1; ; n++ {
			out = capName(stem, "-"+strconv.Itoa(n), ext, maxLen)
			if used[out] == 0 {
				used[name] = n
				break
			}
		}
	}
	used[out]++
	return out
}
