package slack

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/threadbox/threadbox/bot"
)

// A mention in the middle of a thread carries the thread before it (bot.Earlier): a reference taken
// on the ack path, and conversations.replies called only when the thread's first turn runs.

// Thread context defaults (slack.context_messages, slack.context_chars).
const (
	DefaultContextMessages = 20
	DefaultContextChars    = 8000
)

const (
	// repliesPage is the page size asked of conversations.replies (Slack recommends at most 200).
	repliesPage = 200
	// maxReplyPages bounds the pages read: a thread longer than this many messages is read from its
	// start only so far, and its newest messages before the mention are then what fits.
	maxReplyPages = 25
)

// earlierOf is the reference for the messages before ts in the thread rooted at threadTS, or nil
// when there are none to read (a top-level mention, a DM) or reading is off.
func (a *Adapter) earlierOf(k kind, ev event) *bot.Earlier {
	if k != kindMention || ev.ThreadTS == "" || ev.ThreadTS == ev.TS || !a.earlierLimits().On() {
		return nil
	}
	ref := earlierRef{Channel: ev.Channel, ThreadTS: ev.ThreadTS, Before: ev.TS}
	return &bot.Earlier{Ref: ref.String(), Read: func(ctx context.Context) (bot.EarlierMessages, error) {
		return a.readEarlier(ctx, ref)
	}}
}

// earlierRef names the messages of a thread before one of them.
type earlierRef struct {
	Channel, ThreadTS, Before string
}

func (r earlierRef) String() string { return r.Channel + "/" + r.ThreadTS + "/" + r.Before }

func parseEarlierRef(s string) (earlierRef, error) {
	p := strings.Split(s, "/")
	if len(p) != 3 || p[0] == "" || p[1] == "" || p[2] == "" {
		return earlierRef{}, fmt.Errorf("slack: earlier-messages reference %q: want channel/thread_ts/ts", s)
	}
	return earlierRef{Channel: p[0], ThreadTS: p[1], Before: p[2]}, nil
}

// ReadEarlier implements bot.EarlierReader, for a turn taken over from another process.
func (a *Adapter) ReadEarlier(ctx context.Context, ref string) (bot.EarlierMessages, error) {
	return bot.ReadEarlierRef(ctx, ref, a.earlierLimits(), parseEarlierRef, a.readEarlier)
}

// earlierLimits are the caps of slack.context_messages and slack.context_chars.
func (a *Adapter) earlierLimits() bot.EarlierLimits {
	return bot.EarlierLimits{Messages: a.opts.ContextMessages, Chars: a.opts.ContextChars}
}

// readEarlier pages through the thread up to the mention, keeps its first message and the newest
// ones (as many as could be kept), and caps them.
func (a *Adapter) readEarlier(ctx context.Context, r earlierRef) (bot.EarlierMessages, error) {
	botID := a.knownIdentity()
	params := &slack.GetConversationRepliesParameters{ChannelID: r.Channel, Timestamp: r.ThreadTS, Latest: r.Before, Limit: repliesPage}
	var (
		first  *slack.Message
		newest []slack.Message // a window of the newest ContextMessages, oldest first
		seen   int
	)
	for page := 0; page < maxReplyPages; page++ {
		msgs, more, next, err := a.api.GetConversationRepliesContext(ctx, params)
		if err != nil {
			return bot.EarlierMessages{}, fmt.Errorf("slack: conversations.replies: %w", err)
		}
		for _, m := range msgs {
			if !earlierKept(m, r, botID) {
				continue
			}
			seen++
			if m.Timestamp == r.ThreadTS && first == nil {
				first = &m
				continue
			}
			newest = append(newest, m)
			if len(newest) > a.opts.ContextMessages {
				newest = newest[1:]
			}
		}
		if !more || next == "" {
			break
		}
		params.Cursor = next
	}
	var out []bot.EarlierMessage
	if first != nil {
		out = append(out, a.earlierMessage(ctx, *first, botID.UserID))
	}
	for _, m := range newest {
		out = append(out, a.earlierMessage(ctx, m, botID.UserID))
	}
	return bot.CapEarlier(out, first != nil, seen, a.earlierLimits()), nil
}

// earlierKept reports whether a message of the thread is part of the conversation before the
// mention: not the mention or later (Slack always returns the root, whatever latest says), not the
// bot's own posts, not joins and other system messages, not empty.
func earlierKept(m slack.Message, r earlierRef, id identity) bool {
	switch {
	case !tsBefore(m.Timestamp, r.Before):
		return false
	case id.UserID != "" && m.User == id.UserID, id.BotID != "" && m.BotID == id.BotID:
		return false
	case m.SubType != "" && m.SubType != "bot_message" && m.SubType != "file_share" && m.SubType != "thread_broadcast":
		return false
	}
	return strings.TrimSpace(messageText(m)) != "" || len(m.Files) > 0
}

// tsBefore compares Slack timestamps ("seconds.micros") numerically.
func tsBefore(a, b string) bool {
	as, af, _ := strings.Cut(a, ".")
	bs, bf, _ := strings.Cut(b, ".")
	if len(as) != len(bs) {
		return len(as) < len(bs)
	}
	if as != bs {
		return as < bs
	}
	return af < bf
}

// earlierMessage renders one message for the agent: the author's name, the time, and the text as
// people read it, with the names of any attached files.
func (a *Adapter) earlierMessage(ctx context.Context, m slack.Message, botUserID string) bot.EarlierMessage {
	out := bot.EarlierMessage{Text: plainText(messageText(m), botUserID, false)}
	switch {
	case m.User != "":
		out.Author = a.userName(ctx, m.User)
		if out.Author == "" {
			out.Author = m.User
		}
	default:
		out.Bot = true
		out.Author = m.Username
		if out.Author == "" && m.BotProfile != nil {
			out.Author = m.BotProfile.Name
		}
		if out.Author == "" {
			out.Author = m.BotID
		}
	}
	if sec, err := strconv.ParseFloat(m.Timestamp, 64); err == nil {
		out.At = time.Unix(int64(sec), 0)
	}
	var files []string
	for _, f := range m.Files {
		files = append(files, f.Name)
	}
	out.Text = bot.WithAttached(out.Text, files)
	return out
}

// messageText is a message's text, or, for integrations that post only attachments (alerting bots),
// their fallback text.
func messageText(m slack.Message) string {
	if strings.TrimSpace(m.Text) != "" {
		return m.Text
	}
	var parts []string
	for _, at := range m.Attachments {
		if t := strings.TrimSpace(at.Fallback); t != "" {
			parts = append(parts, t)
		} else if t := strings.TrimSpace(at.Text); t != "" {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, "\n")
}
