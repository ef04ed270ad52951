package slack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/bot"
)

// EventsHandler serves POST /slack/events: verify, parse, deduplicate, ack (200), then work.
//
// Answers: 401 for a bad or stale signature (nothing else happens); 400 with X-Slack-No-Retry for a
// body that is not a usable payload (a retry would be just as bad); 503 after Close, so Slack
// redelivers to another replica; 200 for everything else, including events the bot ignores and
// duplicates.
func (a *Adapter) EventsHandler() http.Handler {
	return http.HandlerFunc(a.serveEvents)
}

func (a *Adapter) serveEvents(w http.ResponseWriter, r *http.Request) {
	body, ok := a.readVerified(w, r)
	if !ok {
		return
	}
	env, err := parseEnvelope(body)
	if err != nil {
		a.log.Warn("rejected an unusable Events API body", zap.Error(err))
		w.Header().Set("X-Slack-No-Retry", "1")
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch env.Type {
	case "url_verification":
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(env.Challenge))
		return
	case "app_rate_limited":
		a.log.Warn("Slack is rate-limiting this app's events (more than 30,000 per workspace per hour); some were dropped")
	case "event_callback":
		if a.queue.isClosed() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		retry := r.Header.Get("X-Slack-Retry-Num")
		if retry != "" {
			a.log.Debug("Slack retry", zap.String("event", env.EventID), zap.String("retry", retry),
				zap.String("reason", r.Header.Get("X-Slack-Retry-Reason")))
		}
		if !a.accept(r.Context(), env) {
			http.Error(w, "not taken; redeliver", http.StatusServiceUnavailable)
			return
		}
		a.opts.Metrics.ChatEvent(platform, bot.ChatAck)
	default:
		a.log.Debug("ignored an Events API body", zap.String("type", env.Type))
	}
	w.WriteHeader(http.StatusOK)
}

// accept takes one event before the ack (HTTP or Socket Mode): classify it, deduplicate it, apply the
// rate limits, and hand it to the bot, which records it durably and queues it on its thread; only
// then is it acknowledged. Nothing here waits on Slack's Web API: attachments are fetched when the
// turn runs. Whatever cannot be used is logged and acknowledged, so Slack does not retry it forever.
// It reports false only when the event was not taken (the adapter is closing, the bot could not
// record it, a follow-up's session could not be looked up, or its first delivery is still being
// taken): then it must not be acknowledged, and its dedupe marks are withdrawn so that the
// redelivery (to another replica) is taken.
func (a *Adapter) accept(ctx context.Context, env envelope) bool {
	a.opts.Metrics.ChatEvent(platform, bot.ChatReceived)
	ev, err := parseEvent(env.Event)
	if err != nil {
		a.log.Warn("ignored an event that could not be read", zap.String("event", env.EventID), zap.Error(err))
		return true
	}
	id := a.knownIdentity()
	if id.UserID == "" {
		// Learn who the bot is for the next events, without holding this ack; bot_id still filters
		// the bot's own posts meanwhile.
		a.queue.add(func() {
			if _, err := a.identity(a.base); err != nil {
				a.log.Warn("bot identity unknown", zap.Error(err))
			}
		})
	}
	k, why := classify(ev, id.UserID)
	if k == kindFollowUp && !a.opts.FollowUps {
		k, why = kindIgnore, "follow-ups are off (slack.follow_ups)"
	}
	if k == kindIgnore {
		a.log.Debug("ignored event", zap.String("event", env.EventID), zap.String("type", ev.Type), zap.String("why", why))
		return true
	}
	team := a.teamOf(env, ev)
	key, replyTS := threadOf(team, ev, k)
	log := a.log.With(zap.String("event", env.EventID), zap.String("channel", ev.Channel), zap.String("ts", ev.TS))
	if k == kindFollowUp {
		served, err := a.serves(ctx, key)
		if err != nil {
			// Not known to be chatter: acknowledged, a follow-up in a session's thread would be lost
			// (Slack does not redeliver it). No dedupe mark is set yet, so the redelivery is taken.
			log.Warn("follow-up left unacknowledged: looking up the thread's session", zap.String("thread", key.String()), zap.Error(err))
			return false
		}
		if !served {
			return true
		}
	}
	// Pending marks (bot.PendingTTL) until the event is taken: a crash in between must not leave
	// marks that drop Slack's retries of an event nobody took. A retry that finds a mark still
	// pending (its first delivery is being taken, late for its ack) is not acknowledged: that
	// delivery may yet fail, and an acknowledged retry would then be answered by nobody.
	switch a.seen.FirstPending(ctx, "ev:"+env.EventID) {
	case bot.SeenTaken:
		a.opts.Metrics.ChatEvent(platform, bot.ChatDeduped)
		log.Debug("duplicate event ignored")
		return true
	case bot.SeenPending:
		a.opts.Metrics.ChatEvent(platform, bot.ChatDeduped)
		log.Info("redelivery of an event still being taken; asking for it again later")
		return false
	}
	msgKey := messageKey(team, ev)
	switch a.seen.FirstPending(ctx, "msg:"+msgKey) {
	case bot.SeenTaken:
		a.opts.Metrics.ChatEvent(platform, bot.ChatDeduped)
		log.Debug("message already handled under another event id")
		return true // its event's pending mark lapses: the message's own mark stands
	case bot.SeenPending:
		a.opts.Metrics.ChatEvent(platform, bot.ChatDeduped)
		log.Info("message still being taken under another event id; asking for this one again later")
		a.seen.Forget(context.WithoutCancel(ctx), "ev:"+env.EventID) // this event is not taken
		return false
	}
	forget := func() {
		a.seen.Forget(context.WithoutCancel(ctx), "ev:"+env.EventID)
		a.seen.Forget(context.WithoutCancel(ctx), "msg:"+msgKey)
	}
	taken := true
	defer func() {
		if taken {
			// Off the ack path: the marks are pending until then.
			a.queue.add(func() { a.seen.Confirm(a.base, "ev:"+env.EventID, "msg:"+msgKey) })
		}
	}()
	if a.queue.isClosed() {
		forget()
		taken = false
		return false
	}
	r := a.newReplier(ev.Channel, replyTS, ev.TS)
	text := plainText(ev.Text, id.UserID, k == kindMention)
	name, _ := a.users.Get(ev.User)
	msg := bot.Message{
		Thread: key, ChannelID: ev.Channel, User: bot.User{ID: ev.User, Name: name, Team: senderTeam(ev, team)},
		Text: text, EventID: msgKey, Reply: r.dest(),
	}
	// Access first: a message the policy refuses goes on to Handle (which counts it and tells its
	// sender) without spending the rate limit, so refused strangers cannot use up a channel's budget.
	if bot.Admits(a.handler, msg) && !bot.ExemptFromLimits(text) && !a.withinLimits(ctx, r, team, ev) {
		return true
	}
	msg.Files, msg.Notes = a.inbound(ev)
	msg.Earlier = a.earlierOf(k, ev)
	if name == "" {
		a.queue.add(func() { a.userName(a.base, ev.User) }) // warm the cache for the next message
	}
	log.Debug("handling", zap.String("thread", key.String()), zap.String("kind", k.String()))
	if err := a.handler.Handle(ctx, msg, r); err != nil {
		log.Warn("handling message", zap.String("thread", key.String()), zap.Error(err))
		if errors.Is(err, bot.ErrNotAccepted) {
			forget()
			taken = false
			return false
		}
	}
	return true
}

// teamOf is the workspace an event belongs to (part of every thread key).
func (a *Adapter) teamOf(env envelope, ev event) string {
	switch {
	case env.TeamID != "":
		return env.TeamID
	case ev.Team != "":
		return ev.Team
	}
	return a.knownIdentity().TeamID
}

// senderTeam is the sender's own workspace, which the access policy judges: user_team, else the
// event's team, else source_team (Slack sets them to the sender's workspace, and in a Slack Connect
// channel that is another organisation's), and only when none is present the envelope's team.
func senderTeam(ev event, envTeam string) string {
	for _, t := range []string{ev.UserTeam, ev.Team, ev.SourceTeam} {
		if t != "" {
			return t
		}
	}
	return envTeam
}

// serves reports whether the thread already has a session: only then does a follow-up without a
// mention count, so the bot never joins a conversation it was not invited into.
func (a *Adapter) serves(ctx context.Context, key bot.ThreadKey) (bool, error) {
	if !a.opts.FollowUps || a.opts.Sessions == nil {
		return false, nil
	}
	ok, err := a.opts.Sessions.HasSession(ctx, key)
	if err != nil {
		return false, fmt.Errorf("slack: follow-up: %w", err)
	}
	return ok, nil
}

// withinLimits applies the per-user then the per-channel limit. The first message over a limit in a
// window gets one polite reply; later ones in the same window are dropped quietly.
func (a *Adapter) withinLimits(ctx context.Context, r *replier, team string, ev event) bool {
	ok, notice, mark := a.limits.Check(ctx, a.opts.RateLimit, "u:"+team+":"+ev.User, "c:"+team+":"+ev.Channel, "<@"+ev.User+">")
	if mark {
		a.queue.add(func() {
			if err := r.React(a.base, bot.ReactSkipped); err != nil {
				a.log.Warn("marking a message skipped by the rate limit", zap.Error(err))
			}
		})
	}
	if notice != "" {
		// Posted off the ack path: a call to Slack must not hold up the acknowledgement.
		a.queue.add(func() {
			if err := r.postRaw(a.base, notice); err != nil {
				a.log.Warn("posting the rate-limit notice", zap.Error(err))
			}
		})
	}
	if !ok {
		a.log.Info("rate limit: message dropped", zap.String("team", team), zap.String("user", ev.User), zap.String("ts", ev.TS))
		a.opts.Metrics.ChatEvent(platform, bot.ChatRefusedRateLimit)
	}
	return ok
}

// userName looks a user's name up (users.info), cached; "" when Slack does not say.
func (a *Adapter) userName(ctx context.Context, user string) string {
	if name, ok := a.users.Get(user); ok {
		return name
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u, err := a.api.GetUserInfoContext(ctx, user)
	if err != nil {
		// The name is cosmetic: remember the miss too, rather than ask again for every message.
		a.log.Debug("users.info", zap.String("user", user), zap.Error(err))
		a.users.Set(user, "")
		return ""
	}
	name := u.Profile.DisplayName
	if name == "" {
		name = u.Name
	}
	a.users.Set(user, name)
	return name
}
