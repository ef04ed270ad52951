package discord

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/threadbox/threadbox/bot"
)

// maxInboundFiles bounds how many attachments of one message are used.
const maxInboundFiles = 10

// cdnHosts serve Discord's attachments. Attachments are fetched only from these or from the
// api_url host (a fake or a proxy), so a crafted URL cannot make the bot fetch anything else.
var cdnHosts = map[string]bool{"cdn.discordapp.com": true, "media.discordapp.net": true}

// inbound lists the message's attachments, fetched only when the turn runs. It does no I/O.
func (a *Adapter) inbound(m *discordgo.Message) (files []bot.File, notes []string) {
	for i, at := range m.Attachments {
		if at == nil {
			continue
		}
		// The sender's name, as the sandbox gets it: no line breaks or controls into the prompt.
		name := bot.FileName(at.Filename)
		skip := func(why string) { notes = append(notes, fmt.Sprintf("attachment not used: %s: %s", name, why)) }
		switch {
		case i >= maxInboundFiles:
			skip(fmt.Sprintf("only the first %d attachments are used", maxInboundFiles))
			continue
		case !a.trusted(at.URL):
			skip("not on Discord's CDN")
			continue
		case at.Size < 0:
			skip("Discord gave no usable size for it")
			continue
		case int64(at.Size) > a.opts.MaxInboundFileBytes:
			skip(fmt.Sprintf("%s is over the %s limit per file", bot.HumanSize(int64(at.Size)), bot.HumanSize(a.opts.MaxInboundFileBytes)))
			continue
		}
		ref := at.URL
		files = append(files, bot.File{Name: name, Size: int64(at.Size), Ref: ref, Open: func(ctx context.Context) (io.ReadCloser, error) {
			return a.OpenFile(ctx, ref)
		}})
	}
	return files, notes
}

func (a *Adapter) trusted(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	if u.Host == a.api.Host && u.Scheme == a.api.Scheme {
		return true
	}
	return u.Scheme == "https" && cdnHosts[strings.ToLower(u.Hostname())]
}

// OpenFile implements bot.Platform: it downloads an attachment into a spool file (never into
// memory) within the per-file cap and returns it open; closing it removes the file.
func (a *Adapter) OpenFile(ctx context.Context, ref string) (io.ReadCloser, error) {
	if !a.trusted(ref) {
		return nil, fmt.Errorf("refusing to download %q: not on Discord's CDN", ref)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ref, nil)
	if err != nil {
		return nil, fmt.Errorf("download: %w", err)
	}
	// No token: Discord's attachment URLs are signed; the bot token never goes to a CDN.
	resp, err := a.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("download failed: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("download failed: HTTP %d", resp.StatusCode)
	}
	f, err := bot.Spool("threadbox-discord-", a.opts.MaxInboundFileBytes, func(w io.Writer) error {
		_, err := io.Copy(w, resp.Body)
		return err
	})
	if errors.Is(err, bot.ErrTooBig) {
		return nil, fmt.Errorf("larger than Discord said, and over the %s limit", bot.HumanSize(a.opts.MaxInboundFileBytes))
	}
	if err != nil {
		return nil, fmt.Errorf("download failed: %w", err)
	}
	return f, nil
}
