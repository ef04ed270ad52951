package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/threadbox/threadbox/bot"
)

// Attachments are spooled to files, not kept in memory while their turn waits; a turn reads its
// files once (closing one removes it). The reference recorded with the turn is the spool file's
// name, so a turn taken over after a restart finds it again.

// spoolPrefix names this chat's spool files in the system temporary directory.
const spoolPrefix = "threadbox-web-"

func (s *Server) spool(name string, data []byte) (bot.File, error) {
	return s.spoolPart(name, bytes.NewReader(data), int64(len(data)))
}

// spoolPart copies an attachment from the request into a spool file in small pieces, never whole
// into memory: parallel uploads would otherwise hold up to their caps in memory each, unbounded
// together. Past limit bytes it is refused with 413 and nothing is left on disk.
func (s *Server) spoolPart(name string, part io.Reader, limit int64) (_ bot.File, err error) {
	f, err := os.CreateTemp("", spoolPrefix+"*")
	if err != nil {
		return bot.File{}, s.storeFailed(err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	src := &readErrs{r: io.LimitReader(part, limit+1)}
	n, err := io.Copy(f, src)
	switch {
	case src.err != nil:
		return bot.File{}, bodyError(src.err)
	case err != nil:
		return bot.File{}, s.storeFailed(err)
	case n > limit:
		return bot.File{}, errorf(http.StatusRequestEntityTooLarge, "too large: the limit is %s per part", bot.HumanSize(limit))
	}
	if err := f.Close(); err != nil {
		return bot.File{}, s.storeFailed(err)
	}
	ref := filepath.Base(f.Name())
	return bot.File{Name: name, Size: n, Ref: ref,
		Open:    func(ctx context.Context) (io.ReadCloser, error) { return s.OpenFile(ctx, ref) },
		Discard: func() { s.DiscardFile(ref) },
	}, nil
}

// storeFailed refuses an attachment the spool could not take. The error is the file system's (the
// temporary directory's path, the disk's state): it goes to the log under a ref, the client gets the
// ref.
func (s *Server) storeFailed(err error) error {
	p := bot.Explain(s.log, "spooling an attachment", err)
	return errorf(p.HTTPStatus(), "could not store the attachment: %s", p.String())
}

// readErrs remembers a read error, to tell the client's fault (a broken or oversized body) from the
// disk's.
type readErrs struct {
	r   io.Reader
	err error
}

func (r *readErrs) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		r.err = err
	}
	return n, err
}

// discard removes the spool files of a message refused before the bot's handler took it (once it
// has, the handler and then the pool discard them): no turn will read them, and reading is what
// removes them otherwise.
func discard(files []bot.File) {
	for _, f := range files {
		f.Discard()
	}
}

var _ bot.FileDiscarder = (*Server)(nil)

// DiscardFile implements bot.FileDiscarder: it removes a spool file no turn will read.
func (s *Server) DiscardFile(ref string) {
	if !strings.HasPrefix(ref, spoolPrefix) || ref != filepath.Base(ref) {
		return // not ours: never a path
	}
	_ = os.Remove(filepath.Join(os.TempDir(), ref))
}

var _ bot.Platform = (*Server)(nil)

// Name implements bot.Platform.
func (s *Server) Name() string { return "web" }

// OpenFile implements bot.Platform: ref is a spool file's base name, never a path.
func (s *Server) OpenFile(_ context.Context, ref string) (io.ReadCloser, error) {
	if !strings.HasPrefix(ref, spoolPrefix) || ref != filepath.Base(ref) {
		return nil, fmt.Errorf("web: bad attachment reference %q", ref)
	}
	f, err := os.Open(filepath.Join(os.TempDir(), ref))
	if err != nil {
		return nil, fmt.Errorf("web: attachment: %w", err)
	}
	// Reading does not remove it: a turn whose sandbox is recreated midway copies its attachments
	// again. The turn's end discards it (DiscardFile, through File.Discard).
	return f, nil
}

// replyDest is a replier's durable form (bot.Message.Reply).
type replyDest struct {
	Conversation string `json:"conversation"`
	ReplyTo      string `json:"reply_to"`
}

func (r *replier) dest() json.RawMessage {
	b, _ := json.Marshal(replyDest{Conversation: r.c.id, ReplyTo: r.replyTo})
	return b
}

// Restore implements bot.Platform.
func (s *Server) Restore(reply json.RawMessage) (bot.Replier, error) {
	var d replyDest
	if err := json.Unmarshal(reply, &d); err != nil {
		return nil, fmt.Errorf("web reply address: %w", err)
	}
	if !idPattern.MatchString(d.Conversation) {
		return nil, fmt.Errorf("web reply address: bad conversation %q", d.Conversation)
	}
	return &replier{s: s, c: s.lookup(d.Conversation, true), replyTo: d.ReplyTo}, nil
}
