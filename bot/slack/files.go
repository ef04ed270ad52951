package slack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/bot"
)

// maxInboundFiles bounds how many attachments of one message are downloaded.
const maxInboundFiles = 20

// inbound lists the message's attachments within the per-file and per-message caps, as files fetched
// (with the bot token, from url_private) only when the turn runs. Whatever cannot be used is
// described in notes for the reply, never silently dropped. It does no I/O: it runs before the ack.
func (a *Adapter) inbound(ev event) (files []bot.File, notes []string) {
	list, err := ev.files()
	if err != nil {
		a.log.Warn("attachments could not be read", zap.String("ts", ev.TS), zap.Error(err))
		return nil, []string{"(I could not read the attachments of that message.)"}
	}
	// One line for those past maxInboundFiles, not one each: the list is outside input.
	more := len(list) - maxInboundFiles
	if more > 0 {
		list = list[:maxInboundFiles]
	}
	var total int64
	for _, f := range list {
		// The name the agent will get: no path, no control characters (a CR/LF would forge a line
		// of the reply's notes), bounded in length.
		name := bot.FileName(cmp.Or(f.Name, f.ID))
		skip := func(why string) {
			notes = append(notes, fmt.Sprintf("attachment not used: %s: %s", name, why))
		}
		url := f.URLPrivateDownload
		if url == "" {
			url = f.URLPrivate
		}
		switch {
		case f.Mode == "external" || f.Mode == "tombstone" || url == "":
			// Links to Drive/Dropbox and deleted files have nothing to download; Slack Connect
			// files ("check_file_info") need files.info, which this bot does not call.
			skip("not a file Slack hosts for this bot")
			continue
		case f.Size < 0:
			// Not a size Slack sends; counted, it would make room under the per-message cap.
			skip("Slack gave no usable size for it")
			continue
		case f.Size > a.opts.MaxInboundFileBytes:
			skip(fmt.Sprintf("%s is over the %s limit per file", bot.HumanSize(f.Size), bot.HumanSize(a.opts.MaxInboundFileBytes)))
			continue
		case total+f.Size > a.opts.MaxInboundBytes:
			skip(fmt.Sprintf("the attachments together are over the %s limit", bot.HumanSize(a.opts.MaxInboundBytes)))
			continue
		}
		total += f.Size
		ref := url
		files = append(files, bot.File{Name: name, Size: f.Size, Ref: ref, Open: func(ctx context.Context) (io.ReadCloser, error) {
			return a.OpenFile(ctx, ref)
		}})
	}
	if more > 0 {
		notes = append(notes, fmt.Sprintf("%d more attachments not used: only the first %d are", more, maxInboundFiles))
	}
	return files, notes
}

// OpenFile implements bot.Platform: it downloads an attachment into a spool file (never into memory)
// within the per-file cap, and returns it open; closing it removes the spool file.
func (a *Adapter) OpenFile(ctx context.Context, ref string) (io.ReadCloser, error) {
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	// GetFileContext sends the token only to https Slack hosts or to slack.api_url's host, and
	// reports a redirect to the sign-in page instead of handing back its HTML.
	f, err := bot.Spool("threadbox-slack-", a.opts.MaxInboundFileBytes, func(w io.Writer) error {
		return a.api.GetFileContext(dctx, ref, w)
	})
	if errors.Is(err, bot.ErrTooBig) {
		return nil, fmt.Errorf("larger than Slack said, and over the %s limit", bot.HumanSize(a.opts.MaxInboundFileBytes))
	}
	if err != nil {
		return nil, fmt.Errorf("download failed: %w", err)
	}
	return f, nil
}
