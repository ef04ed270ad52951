package slack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/bot"
)

// maxInboundFiles bounds how many attachments of one message are downloaded.
const maxInboundFiles = 20

var errTooBig = errors.New("over the size limit")

// capWriter collects up to max bytes and fails past them, so a file that is larger than it claimed
// cannot fill memory.
type capWriter struct {
	buf bytes.Buffer
	max int64
}

func (w *capWriter) Write(p []byte) (int, error) {
	if int64(w.buf.Len()+len(p)) > w.max {
		return 0, errTooBig
	}
	return w.buf.Write(p)
}

// download fetches the message's attachments with the bot token (url_private), within the per-file
// and per-message caps. Whatever cannot be fetched is described in notes for the thread, never
// silently dropped.
func (a *Adapter) download(ctx context.Context, ev event) (files []bot.File, notes []string) {
	list, err := ev.files()
	if err != nil {
		a.log.Warn("attachments could not be read", zap.String("ts", ev.TS), zap.Error(err))
		return nil, []string{"(I could not read the attachments of that message.)"}
	}
	var total int64
	for i, f := range list {
		name := f.Name
		if name == "" {
			name = f.ID
		}
		skip := func(why string) {
			notes = append(notes, fmt.Sprintf("attachment not used: %s: %s", name, why))
		}
		url := f.URLPrivateDownload
		if url == "" {
			url = f.URLPrivate
		}
		switch {
		case i >= maxInboundFiles:
			skip(fmt.Sprintf("only the first %d attachments are used", maxInboundFiles))
			continue
		case f.Mode == "external" || f.Mode == "tombstone" || url == "":
			// Links to Drive/Dropbox and deleted files have nothing to download; Slack Connect
			// files ("check_file_info") need files.info, which this bot does not call.
			skip("not a file Slack hosts for this bot")
			continue
		case f.Size > a.opts.MaxInboundFileBytes:
			skip(fmt.Sprintf("%s is over the %s limit per file", bot.HumanSize(f.Size), bot.HumanSize(a.opts.MaxInboundFileBytes)))
			continue
		case total+f.Size > a.opts.MaxInboundBytes:
			skip(fmt.Sprintf("the attachments together are over the %s limit", bot.HumanSize(a.opts.MaxInboundBytes)))
			continue
		}
		w := &capWriter{max: min(a.opts.MaxInboundFileBytes, a.opts.MaxInboundBytes-total)}
		dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		// GetFileContext sends the token only to https Slack hosts or to slack.api_url's host, and
		// reports a redirect to the sign-in page instead of handing back its HTML.
		err := a.api.GetFileContext(dctx, url, w)
		cancel()
		if err != nil {
			a.log.Warn("downloading an attachment", zap.String("file", f.ID), zap.Error(err))
			if errors.Is(err, errTooBig) {
				skip("larger than Slack said, and over the limit")
			} else {
				skip("download failed: " + bot.UserError(err))
			}
			continue
		}
		total += int64(w.buf.Len())
		files = append(files, bot.File{Name: name, Data: w.buf.Bytes()})
	}
	return files, notes
}
