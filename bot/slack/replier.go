package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/threadbox/threadbox/bot"
)

// Timeouts per Web API call: a stuck call must not hold a turn's delivery forever.
const (
	postTimeout   = 30 * time.Second
	updateTimeout = 10 * time.Second
	reactTimeout  = 10 * time.Second
	uploadTimeout = 10 * time.Minute
	// maxRetryWait caps how long Post and Upload wait on one Retry-After before giving up.
	maxRetryWait = 30 * time.Second
	postAttempts = 4
)

// replier answers one message: in its thread (or top level in a DM), with reactions on the message.
type replier struct {
	a *Adapter
	// channel is where replies go; threadTS the thread ("" for top level); msgTS the message that
	// gets the reactions.
	channel, threadTS, msgTS string

	// mu protects progressTS: the one "working…" message, created on first progress and edited after.
	mu         sync.Mutex
	progressTS string
}

var _ bot.Replier = (*replier)(nil)

func (a *Adapter) newReplier(channel, threadTS, msgTS string) *replier {
	return &replier{a: a, channel: channel, threadTS: threadTS, msgTS: msgTS}
}

// replyDest is a replier's durable form (bot.Message.Reply).
type replyDest struct {
	Channel  string `json:"channel"`
	ThreadTS string `json:"thread_ts,omitempty"`
	MsgTS    string `json:"ts,omitempty"`
}

func (r *replier) dest() json.RawMessage {
	b, _ := json.Marshal(replyDest{Channel: r.channel, ThreadTS: r.threadTS, MsgTS: r.msgTS})
	return b
}

var _ bot.Platform = (*Adapter)(nil)

// Name implements bot.Platform.
func (a *Adapter) Name() string { return platform }

// platform is the adapter's name: in thread keys, audit actors and metric labels.
const platform = "slack"

// Restore implements bot.Platform.
func (a *Adapter) Restore(reply json.RawMessage) (bot.Replier, error) {
	var d replyDest
	if err := json.Unmarshal(reply, &d); err != nil {
		return nil, fmt.Errorf("slack reply address: %w", err)
	}
	if d.Channel == "" {
		return nil, errors.New("slack reply address without a channel")
	}
	return a.newReplier(d.Channel, d.ThreadTS, d.MsgTS), nil
}

// msgOptions are shared by every post. Unfurls are off: an agent's answer full of links would
// otherwise fill the thread with previews.
func (r *replier) msgOptions(text string, escape bool) []slack.MsgOption {
	opts := []slack.MsgOption{slack.MsgOptionText(text, escape), slack.MsgOptionDisableLinkUnfurl(), slack.MsgOptionDisableMediaUnfurl()}
	if r.threadTS != "" {
		opts = append(opts, slack.MsgOptionTS(r.threadTS))
	}
	return opts
}

// Post implements bot.Replier. Text is escaped (& < >), so an agent's "<!channel>" or "<@U…>" stays
// text instead of pinging people. A rate limit is waited out (Retry-After, a few times): the answer
// must arrive.
func (r *replier) Post(ctx context.Context, text string) error {
	return r.post(ctx, text, true)
}

var _ bot.PrivatePoster = (*replier)(nil)

// PostPrivate implements bot.PrivatePoster with chat.postEphemeral, in the thread, formatted like a
// slash command's reply (escaped, tables fenced).
func (r *replier) PostPrivate(ctx context.Context, userID, text string) error {
	opts := []slack.MsgOption{slack.MsgOptionText(formatCommandOutput(text), false)}
	if r.threadTS != "" {
		opts = append(opts, slack.MsgOptionTS(r.threadTS))
	}
	return withRetry(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, postTimeout)
		defer cancel()
		_, err := r.a.api.PostEphemeralContext(ctx, r.channel, userID, opts...)
		return err
	})
}

// postRaw posts the bot's own text, markup intact (a mention of the user it addresses).
func (r *replier) postRaw(ctx context.Context, text string) error {
	return r.post(ctx, text, false)
}

func (r *replier) post(ctx context.Context, text string, escape bool) error {
	return transient(withRetry(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, postTimeout)
		defer cancel()
		_, _, err := r.a.api.PostMessageContext(ctx, r.channel, r.msgOptions(text, escape)...)
		return err
	}))
}

// transient marks Slack's "try later" answers that slack-go does not mark itself (an ok:false
// ratelimited, a workspace's message_limit_exceeded, Slack's own failures) for bot.RetryLater.
func transient(err error) error {
	if _, ok := rateLimited(err); ok {
		return bot.Transient(err)
	}
	for _, code := range []string{"internal_error", "fatal_error", "service_unavailable", "request_timeout"} {
		if isSlackError(err, code) {
			return bot.Transient(err)
		}
	}
	return err
}

// Progress implements bot.Replier: the first call posts the "working…" message, later ones edit it
// (or post it again if it was deleted).
// It never waits: a rate limit comes back as *bot.RateLimitedError, and the coalescer holds off for
// its RetryAfter while the turn carries on.
func (r *replier) Progress(ctx context.Context, text string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, updateTimeout)
	defer cancel()
	var err error
	if r.progressTS != "" {
		_, _, _, err = r.a.api.UpdateMessageContext(ctx, r.channel, r.progressTS, slack.MsgOptionText(text, true))
		if isSlackError(err, "message_not_found") || isSlackError(err, "cant_update_message") {
			// Someone deleted the progress message: every later edit would fail the same way, and
			// the rest of the turn's progress (its final state included) would be lost. Post anew.
			r.progressTS, err = "", nil
		}
	}
	if r.progressTS == "" && err == nil {
		var ts string
		_, ts, err = r.a.api.PostMessageContext(ctx, r.channel, r.msgOptions(text, true)...)
		if err == nil {
			r.progressTS = ts
		}
	}
	if d, ok := rateLimited(err); ok {
		return &bot.RateLimitedError{RetryAfter: d}
	}
	if err != nil {
		return fmt.Errorf("slack: progress: %w", err)
	}
	return nil
}

// Upload implements bot.Replier with the external upload flow (files.getUploadURLExternal, the
// upload URL, files.completeUploadExternal into the channel and thread).
func (r *replier) Upload(ctx context.Context, name string, data []byte) (string, error) {
	size := int64(len(data))
	switch {
	case size == 0:
		return "", errors.New("empty file (Slack refuses zero-length uploads)")
	case size > r.a.opts.MaxFileBytes:
		return "", fmt.Errorf("%s is over Slack's upload limit of %s", bot.HumanSize(size), bot.HumanSize(r.a.opts.MaxFileBytes))
	}
	var id string
	err := withRetry(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, uploadTimeout)
		defer cancel()
		f, err := r.a.api.UploadFileContext(ctx, slack.UploadFileParameters{
			Filename: name, Title: name, FileSize: len(data), Reader: bytes.NewReader(data),
			Channel: r.channel, ThreadTimestamp: r.threadTS,
		})
		if err == nil {
			id = f.ID
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("slack: uploading %s: %w", name, err)
	}
	return id, nil
}

// React implements bot.Replier. The final ✅ or ❌ replaces the 👀 of receipt, so the message shows
// its state at a glance. Slack allows few reactions a minute (reactions.add is Tier 3): a mark that
// says how a message ended (✅, ❌, 🚫) waits out a rate limit, as a post does, so the message is not
// left under 👀 as if still waiting; 👀 itself is tried once, since it only says "seen" and a late one
// would hold the final mark back (bot orders a message's reactions).
func (r *replier) React(ctx context.Context, name string) error {
	ref := slack.NewRefToMessage(r.channel, r.msgTS)
	call := func(f func(ctx context.Context) error) error {
		once := func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, reactTimeout)
			defer cancel()
			return f(ctx)
		}
		if name == bot.ReactSeen {
			return once(ctx)
		}
		return withRetry(ctx, once)
	}
	err := call(func(ctx context.Context) error {
		err := r.a.api.AddReactionContext(ctx, name, ref)
		if isSlackError(err, "already_reacted") {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("slack: reaction %s: %w", name, err)
	}
	if name == bot.ReactDone || name == bot.ReactError {
		err := call(func(ctx context.Context) error {
			err := r.a.api.RemoveReactionContext(ctx, bot.ReactSeen, ref)
			if isSlackError(err, "no_reaction") {
				return nil
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("slack: removing %s: %w", bot.ReactSeen, err)
		}
	}
	return nil
}

// Limits implements bot.Replier.
func (r *replier) Limits() bot.Limits { return r.a.Limits() }

// rateLimited recognises Slack's three ways of saying "slow down": HTTP 429 with Retry-After
// (slack-go's RateLimitedError), 429 without it (a workspace's message_limit_exceeded, a
// StatusCodeError), and an ok:false "ratelimited" on HTTP 200.
func rateLimited(err error) (time.Duration, bool) {
	if err == nil {
		return 0, false
	}
	if rl, ok := errors.AsType[*slack.RateLimitedError](err); ok {
		return max(rl.RetryAfter, time.Second), true
	}
	if sc, ok := errors.AsType[slack.StatusCodeError](err); ok && sc.Code == http.StatusTooManyRequests {
		return 5 * time.Second, true
	}
	if isSlackError(err, "ratelimited") || isSlackError(err, "message_limit_exceeded") {
		return time.Second, true
	}
	return 0, false
}

func isSlackError(err error, code string) bool {
	se, ok := errors.AsType[slack.SlackErrorResponse](err)
	return ok && se.Err == code
}

// retry waits out a rate limit (up to maxRetryWait at a time) a few times.
var retry = bot.RetryPolicy{Attempts: postAttempts, MaxWait: maxRetryWait, Wait: rateLimited}

// withRetry runs f under retry.
func withRetry(ctx context.Context, f func(ctx context.Context) error) error { return retry.Do(ctx, f) }
