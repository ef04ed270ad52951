package discord

import (
	"context"
	"fmt"
	"strings"

	"github.com/bwmarrin/discordgo"

	"github.com/threadbox/threadbox/bot"
)

// A mention in a thread (or in a channel, where it starts one) carries what was said before it
// (bot.Earlier), as Slack's adapter does: a reference taken on the gateway's reader, and the
// history (GET /channels/{id}/messages) read only when the thread's first turn runs.

// Thread context defaults (discord.context_messages, discord.context_chars): Slack's.
const (
	DefaultContextMessages = 20
	DefaultContextChars    = 8000
)

const (
	// historyPage is the most messages Discord returns per call.
	historyPage = 100
	// maxHistoryPages bounds the pages read back from the mention: a longer thread is read only
	// this far, and its start is then not known.
	maxHistoryPages = 10
)

// earlierRef names the messages of a channel or thread before one of them. Whole is set for a
// thread, whose first message is kept when the read reaches it; a channel's history has no first
// message worth keeping.
type earlierRef struct {
	Channel, Before string
	Whole           bool
}

func (r earlierRef) String() string {
	kind := "channel"
	if r.Whole {
		kind = "thread"
	}
	return kind + "/" + r.Channel + "/" + r.Before
}

func parseEarlierRef(s string) (earlierRef, error) {
	p := strings.Split(s, "/")
	if len(p) != 3 || (p[0] != "thread" && p[0] != "channel") || p[1] == "" || p[2] == "" {
		return earlierRef{}, fmt.Errorf("discord: earlier-messages reference %q: want thread|channel/<channel>/<message>", s)
	}
	return earlierRef{Channel: p[1], Before: p[2], Whole: p[0] == "thread"}, nil
}

// earlierOf is the reference for the messages before m where it was posted, or nil when there are
// none to read (a DM, whose session spans every DM) or reading is off.
func (a *Adapter) earlierOf(pl place, m *discordgo.Message) *bot.Earlier {
	if !a.earlierLimits().On() || (pl != placeThread && pl != placeChannel) {
		return nil
	}
	ref := earlierRef{Channel: m.ChannelID, Before: m.ID, Whole: pl == placeThread}
	return &bot.Earlier{Ref: ref.String(), Read: func(ctx context.Context) (bot.EarlierMessages, error) {
		return a.readEarlier(ctx, ref)
	}}
}

// ReadEarlier implements bot.EarlierReader, for a turn taken over from another process.
func (a *Adapter) ReadEarlier(ctx context.Context, ref string) (bot.EarlierMessages, error) {
	return bot.ReadEarlierRef(ctx, ref, a.earlierLimits(), parseEarlierRef, a.readEarlier)
}

// earlierLimits are the caps of discord.context_messages and discord.context_chars.
func (a *Adapter) earlierLimits() bot.EarlierLimits {
	return bot.EarlierLimits{Messages: a.opts.ContextMessages, Chars: a.opts.ContextChars}
}

// readEarlier pages back from the mention (Discord serves history newest first), keeping the
// newest messages that count, and, for a thread read to its start, its first message; then caps
// them as Slack's are capped.
func (a *Adapter) readEarlier(ctx context.Context, r earlierRef) (bot.EarlierMessages, error) {
	botID := a.botUserID()
	var (
		kept    []*discordgo.Message // newest first
		oldest  *discordgo.Message   // the oldest kept, once the read reached the start
		seen    int
		reached bool
	)
	before := r.Before
	for page := 0; page < maxHistoryPages; page++ {
		msgs, err := a.s.ChannelMessages(r.Channel, historyPage, before, "", "", discordgo.WithContext(ctx))
		if err != nil {
			return bot.EarlierMessages{}, fmt.Errorf("discord: reading channel %s: %w", r.Channel, err)
		}
		for _, m := range msgs {
			if m = earlierKept(m, botID); m == nil {
				continue
			}
			if !r.Whole && mentions(m, botID) {
				continue // in a channel, a mention of the bot is another thread's request
			}
			seen++
			if len(kept) < a.opts.ContextMessages {
				kept = append(kept, m)
			} else if r.Whole {
				oldest = m // the thread's first message, if no older one follows
			}
		}
		if len(msgs) < historyPage {
			reached = true
			break
		}
		if len(kept) >= a.opts.ContextMessages && !r.Whole {
			break // a channel's start is not wanted: the newest are all that count
		}
		before = msgs[len(msgs)-1].ID
	}
	keepFirst := r.Whole && reached && len(kept) > 0
	if keepFirst && oldest == nil {
		// Everything fit: the oldest kept is the thread's first.
		oldest, kept = kept[len(kept)-1], kept[:len(kept)-1]
	} else if !keepFirst {
		oldest = nil
	}
	var out []bot.EarlierMessage
	if oldest != nil {
		out = append(out, earlierMessage(oldest))
	}
	for i := len(kept) - 1; i >= 0; i-- {
		out = append(out, earlierMessage(kept[i]))
	}
	return bot.CapEarlier(out, oldest != nil, seen, a.earlierLimits()), nil
}

// earlierKept is the message of the conversation m stands for, or nil: not the bot's own posts, not
// joins, pins and other system messages, not empty. A thread's starter message (type 21) stands for
// the message the thread was started from, which Discord sends along.
func earlierKept(m *discordgo.Message, botID string) *discordgo.Message {
	if m == nil {
		return nil
	}
	if m.Type == discordgo.MessageTypeThreadStarterMessage {
		m = m.ReferencedMessage
		if m == nil {
			return nil
		}
	}
	switch {
	case m.Author == nil, m.Author.ID == botID:
		return nil
	case m.Type != discordgo.MessageTypeDefault && m.Type != discordgo.MessageTypeReply:
		return nil
	case strings.TrimSpace(m.Content) == "" && len(m.Attachments) == 0:
		return nil
	}
	return m
}

// earlierMessage renders one message for the agent: who, when, and the text with mentions as
// names, plus the names of any attached files.
func earlierMessage(m *discordgo.Message) bot.EarlierMessage {
	out := bot.EarlierMessage{Author: m.Author.Username, Bot: m.Author.Bot, At: m.Timestamp, Text: m.ContentWithMentionsReplaced()}
	if m.Author.GlobalName != "" {
		out.Author = m.Author.GlobalName
	}
	var files []string
	for _, f := range m.Attachments {
		if f != nil {
			files = append(files, bot.FileName(f.Filename)) // the sender's: no line breaks into the prompt
		}
	}
	out.Text = bot.WithAttached(out.Text, files)
	return out
}

func mentions(m *discordgo.Message, userID string) bool {
	for _, u := range m.Mentions {
		if u != nil && u.ID == userID {
			return true
		}
	}
	return false
}
