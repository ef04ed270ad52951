package discord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/bot"
)

// gatewayTimeout bounds the work done for one dispatch on the gateway's reader.
const gatewayTimeout = 10 * time.Second

// onMessage takes MESSAGE_CREATE: a mention in a guild text channel (a thread is started from it),
// a mention in a thread, or a DM. The bot's own messages, other bots and everything else are ignored.
func (a *Adapter) onMessage(_ *discordgo.Session, m *discordgo.MessageCreate) {
	if m.Message == nil || m.Author == nil || a.isClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(a.base, gatewayTimeout)
	defer cancel()
	if err := a.acceptMessage(ctx, m.Message); err != nil && !errors.Is(err, bot.ErrNotAccepted) {
		// The gateway has no acknowledgement: a message not taken is lost unless the user sends it
		// again, so it is logged loudly (one the handler refused is logged and told by tellNotTaken).
		a.log.Error("message not taken", zap.String("message", m.ID), zap.String("channel", m.ChannelID), zap.Error(err))
	}
}

// where a message or interaction comes from.
type place int

const (
	placeChannel place = iota // a guild text channel: a thread is started
	placeThread               // a thread: its session
	placeDM                   // a DM: the user's session
	placeOther                // voice, forum, …: ignored
)

// locate classifies a channel, and for a thread names the channel it was started in (the access
// policy's channel allowlist matches a thread by it), asking Discord once per channel (GET
// /channels/{id}, cached "<type>:<parent>": neither ever changes).
func (a *Adapter) locate(ctx context.Context, guildID, channelID string) (pl place, parent string, err error) {
	if guildID == "" {
		return placeDM, "", nil
	}
	v, ok := a.channels.Get(channelID)
	if !ok {
		c, err := a.s.Channel(channelID, discordgo.WithContext(ctx))
		if err != nil {
			return placeOther, "", fmt.Errorf("looking up channel %s: %w", channelID, err)
		}
		v = channelKind(c.Type, c.ParentID)
		a.channels.Set(channelID, v)
	}
	kind, parent, _ := strings.Cut(v, ":")
	switch kind {
	case fmt.Sprint(int(discordgo.ChannelTypeGuildText)), fmt.Sprint(int(discordgo.ChannelTypeGuildNews)):
		return placeChannel, "", nil
	case fmt.Sprint(int(discordgo.ChannelTypeGuildPublicThread)), fmt.Sprint(int(discordgo.ChannelTypeGuildPrivateThread)),
		fmt.Sprint(int(discordgo.ChannelTypeGuildNewsThread)):
		return placeThread, parent, nil
	}
	return placeOther, "", nil
}

// threadTypeIn is the type of a thread started in a channel locate has seen: an announcement
// channel holds announcement threads only (Discord refuses a public one there).
func (a *Adapter) threadTypeIn(channelID string) discordgo.ChannelType {
	v, _ := a.channels.Get(channelID)
	if kind, _, _ := strings.Cut(v, ":"); kind == fmt.Sprint(int(discordgo.ChannelTypeGuildNews)) {
		return discordgo.ChannelTypeGuildNewsThread
	}
	return discordgo.ChannelTypeGuildPublicThread
}

// channelKind is a channel's entry in Adapter.channels.
func channelKind(t discordgo.ChannelType, parent string) string {
	return fmt.Sprintf("%d:%s", int(t), parent)
}

func (a *Adapter) mentionsBot(m *discordgo.Message, botID string) bool {
	for _, u := range m.Mentions {
		if u != nil && u.ID == botID {
			return true
		}
	}
	return false
}

// acceptMessage classifies, deduplicates, rate-limits and hands one message to the bot.
func (a *Adapter) acceptMessage(ctx context.Context, m *discordgo.Message) error {
	botID := a.botUserID()
	switch {
	case m.Author.Bot || m.Author.ID == botID:
		return nil
	case m.Type != discordgo.MessageTypeDefault && m.Type != discordgo.MessageTypeReply:
		return nil
	case m.GuildID != "" && !a.mentionsBot(m, botID):
		return nil
	}
	pl, parent, err := a.locate(ctx, m.GuildID, m.ChannelID)
	if err != nil {
		return err
	}
	if pl == placeOther {
		return nil
	}
	// A resume may replay dispatches already handled: the message id is the dedupe key.
	mark := "msg:" + m.ID
	if !a.seen.First(ctx, mark) {
		a.log.Debug("duplicate message ignored", zap.String("message", m.ID))
		return nil
	}
	forget := func() { a.seen.Forget(context.WithoutCancel(ctx), mark) }
	text := strings.TrimSpace(strings.NewReplacer("<@"+botID+">", "", "<@!"+botID+">", "").Replace(m.Content))
	var key bot.ThreadKey
	r := &replier{a: a, reactChannel: m.ChannelID, reactMsg: m.ID}
	switch pl {
	case placeDM:
		key, r.channel, r.dm = bot.DiscordDM(m.Author.ID), m.ChannelID, true
	case placeThread:
		key, r.channel = bot.DiscordThread(m.GuildID, m.ChannelID), m.ChannelID
	case placeChannel:
		parent = m.ChannelID // the thread this message starts will be in it
		// A thread started from a message has the message's id, so its key is known before it
		// exists; the replier starts it (once) before its first post.
		key, r.channel = bot.DiscordThread(m.GuildID, m.ID), m.ID
		r.startParent, r.threadName = m.ChannelID, threadName(text)
	}
	msg := bot.Message{
		Thread: key, ChannelID: r.channel, User: bot.User{ID: m.Author.ID, Name: m.Author.Username},
		Text: text, EventID: "discord:" + m.ID, Reply: r.dest(), ParentChannelID: parent,
	}
	// Access first: a message the policy refuses goes on to Handle (which counts it and tells its
	// sender) without spending the rate limit, so refused strangers cannot use up a channel's budget.
	admitted := bot.Admits(a.handler, msg)
	if !admitted && r.startParent != "" {
		// Nor may they open threads named by them: the refusal goes to the channel, where they
		// wrote (Discord has no private message there), and no thread is started.
		r = &replier{a: a, channel: m.ChannelID, reactChannel: m.ChannelID, reactMsg: m.ID}
		msg.Reply = r.dest()
	}
	if admitted && !bot.ExemptFromLimits(text) {
		ok, notice, mark := a.limits.Check(ctx, a.opts.RateLimit, "u:"+m.Author.ID, "c:"+m.ChannelID, "<@"+m.Author.ID+">")
		if mark {
			a.goBackground(func(ctx context.Context) {
				if err := r.React(ctx, bot.ReactSkipped); err != nil {
					a.log.Warn("marking a message skipped by the rate limit", zap.Error(err))
				}
			})
		}
		if !ok {
			if notice != "" {
				plain := &replier{a: a, channel: m.ChannelID}
				a.goBackground(func(ctx context.Context) {
					if err := plain.Post(ctx, notice); err != nil {
						a.log.Warn("posting the rate-limit notice", zap.Error(err))
					}
				})
			}
			return nil
		}
	}
	msg.Files, msg.Notes = a.inbound(m)
	msg.Earlier = a.earlierOf(pl, m)
	if err := a.handler.Handle(ctx, msg, r); err != nil {
		if errors.Is(err, bot.ErrNotAccepted) {
			forget()
			a.tellNotTaken(ctx, m, err)
			return err
		}
		a.log.Warn("handling message", zap.String("thread", key.String()), zap.Error(err))
	}
	if r.startParent != "" {
		// Start the thread now rather than at the first reply, so the user sees it at once.
		a.goBackground(func(ctx context.Context) {
			if err := r.ensureThread(ctx); err != nil {
				a.log.Warn("starting a thread", zap.String("message", m.ID), zap.Error(err))
			}
		})
	}
	a.goBackground(func(ctx context.Context) { r.typing(ctx) })
	return nil
}

// tellNotTaken answers a message the bot could not take. The gateway has no acknowledgement and
// never delivers a message again, so only its user can: ❌ on the message, and a line in its
// channel (not a new thread: nothing was started) saying to send it again.
func (a *Adapter) tellNotTaken(ctx context.Context, m *discordgo.Message, err error) {
	p := bot.Explain(a.log, "message not taken", err, zap.String("message", m.ID))
	plain := &replier{a: a, channel: m.ChannelID, reactChannel: m.ChannelID, reactMsg: m.ID}
	a.goBackground(func(ctx context.Context) {
		_ = plain.React(ctx, bot.ReactError)
		if err := plain.Post(ctx, notTakenText(p)); err != nil {
			a.log.Warn("telling a user their message was not taken", zap.String("message", m.ID), zap.Error(err))
		}
	})
}

// notTakenText is the reply to a message or command the bot could not take.
func notTakenText(p bot.Problem) string {
	return "I could not take that message (a service I depend on failed; ref " + p.Ref + "). Please send it again in a minute."
}

// threadName names a thread from its first message: Discord allows 1-100 characters.
// Characters that show nothing (zero-width spaces and joiners, bidi controls, other format and
// control characters) are dropped: a name of nothing but those is one Discord refuses, and the
// thread, with every reply in it, would then fail.
func threadName(text string) string {
	text = strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Cf, r) || unicode.IsControl(r) || r == utf8.RuneError {
			return ' '
		}
		return r
	}, text)
	name := strings.Join(strings.Fields(text), " ")
	if name == "" {
		name = "Threadbox"
	}
	if utf8.RuneCountInString(name) > 90 {
		name = string([]rune(name)[:89]) + "…"
	}
	return name
}
