package discord

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/bot"
)

// Timeouts per REST call: a stuck call must not hold a turn's delivery forever.
const (
	postTimeout   = 30 * time.Second
	editTimeout   = 10 * time.Second
	uploadTimeout = 5 * time.Minute
	// maxRetryWait caps one retry_after that Post and Upload wait out; postAttempts caps the tries.
	maxRetryWait = time.Minute
	postAttempts = 5
	// typingEvery renews the typing indicator, which Discord shows for about 10 seconds.
	typingEvery = 8 * time.Second
)

// emoji maps the bot's reaction names to Discord's unicode emoji.
var emoji = map[string]string{bot.ReactSeen: "👀", bot.ReactDone: "✅", bot.ReactError: "❌", bot.ReactSkipped: "🚫"}

// replier answers one message or interaction. Messages go to channel (a thread or a DM). When
// startParent is set, channel is a thread still to be started from the message of the same id in
// startParent. With an interaction token, the first answer edits the interaction's @original
// response and later ones are follow-ups; if the token has expired (15 minutes) they go to channel.
type replier struct {
	a                       *Adapter
	channel                 string
	startParent, threadName string
	reactChannel, reactMsg  string
	token                   string
	ephemeral               bool
	// dm is set when channel is a DM, which only its user sees: private posts go there.
	dm bool
	// ready, when set, is closed once the interaction is deferred: @original exists only then.
	ready chan struct{}

	// mu protects the following.
	mu          sync.Mutex
	threadReady bool
	progressID  string
	// progressAfter is when progress may be sent again after a 429: discordgo would otherwise sleep
	// in its bucket (not cancellable) and hold the turn's final update.
	progressAfter time.Time
	answered      bool
	// progressOnOriginal: the progress was shown in @original, so the answer replaced it.
	progressOnOriginal bool
	lastTyping         time.Time
}

var (
	_ bot.Replier       = (*replier)(nil)
	_ bot.PrivatePoster = (*replier)(nil)
)

// replyDest is a replier's durable form (bot.Message.Reply).
type replyDest struct {
	Channel      string `json:"channel"`
	StartParent  string `json:"start_parent,omitempty"`
	ThreadName   string `json:"thread_name,omitempty"`
	ReactChannel string `json:"react_channel,omitempty"`
	ReactMsg     string `json:"react_msg,omitempty"`
	Token        string `json:"token,omitempty"`
	Ephemeral    bool   `json:"ephemeral,omitempty"`
	DM           bool   `json:"dm,omitempty"`
}

func (r *replier) dest() json.RawMessage {
	b, _ := json.Marshal(replyDest{Channel: r.channel, StartParent: r.startParent, ThreadName: r.threadName,
		ReactChannel: r.reactChannel, ReactMsg: r.reactMsg, Token: r.token, Ephemeral: r.ephemeral, DM: r.dm})
	return b
}

// Restore implements bot.Platform.
func (a *Adapter) Restore(reply json.RawMessage) (bot.Replier, error) {
	var d replyDest
	if err := json.Unmarshal(reply, &d); err != nil {
		return nil, fmt.Errorf("discord reply address: %w", err)
	}
	if d.Channel == "" {
		return nil, errors.New("discord reply address without a channel")
	}
	return &replier{a: a, channel: d.Channel, startParent: d.StartParent, threadName: d.ThreadName,
		reactChannel: d.ReactChannel, reactMsg: d.ReactMsg, token: d.Token, ephemeral: d.Ephemeral, dm: d.DM}, nil
}

// noMentions keeps an agent's "@everyone" or "<@id>" as text.
var noMentions = &discordgo.MessageAllowedMentions{Parse: []discordgo.AllowedMentionType{}}

// ensureThread starts the thread from its message, once. Discord refuses a second thread for a
// message (160004): then it exists already, started by this process or another.
func (r *replier) ensureThread(ctx context.Context) error {
	if r.startParent == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.threadReady {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, postTimeout)
	defer cancel()
	_, err := r.a.s.MessageThreadStartComplex(r.startParent, r.channel, &discordgo.ThreadStart{
		Name: r.threadName, AutoArchiveDuration: 1440, Type: discordgo.ChannelTypeGuildPublicThread,
	}, discordgo.WithContext(ctx))
	if err != nil && restCode(err) != 160004 {
		return fmt.Errorf("discord: starting a thread: %w", err)
	}
	r.a.channels.Set(r.channel, channelKind(discordgo.ChannelTypeGuildPublicThread, r.startParent))
	r.threadReady = true
	return nil
}

func restCode(err error) int {
	if re, ok := errors.AsType[*discordgo.RESTError](err); ok && re.Message != nil {
		return re.Message.Code
	}
	return 0
}

// tokenGone recognises an interaction token that no longer works (expired after 15 minutes).
func tokenGone(err error) bool {
	re, ok := errors.AsType[*discordgo.RESTError](err)
	if !ok || re.Response == nil {
		return false
	}
	code := restCode(err)
	return re.Response.StatusCode == http.StatusUnauthorized || code == 50027 || code == 10015
}

// Post implements bot.Replier. A 429 is waited out (retry_after, a few times): the answer must
// arrive.
func (r *replier) Post(ctx context.Context, text string) error {
	return transient(r.send(ctx, text, nil))
}

// transient marks Discord's "try later" answers (a 429 past the retries, a 5xx) for bot.RetryLater.
func transient(err error) error {
	if _, ok := errors.AsType[*discordgo.RateLimitError](err); ok {
		return bot.Transient(err)
	}
	if re, ok := errors.AsType[*discordgo.RESTError](err); ok && re.Response != nil && re.Response.StatusCode >= 500 {
		return bot.Transient(err)
	}
	return err
}

// send posts text and files: into the interaction (editing @original first) or the channel. An
// ephemeral reply never goes to the channel, where everyone would see it: without a working token
// it is an error wrapping bot.ErrNoPrivate, nothing posted.
func (r *replier) send(ctx context.Context, text string, files []*discordgo.File) error {
	if tok := r.interactionToken(ctx); tok != "" {
		err := withRetry(ctx, func(ctx context.Context) error { return r.sendInteraction(ctx, tok, text, files) })
		_, missing := errors.AsType[*notYet](err)
		if (!tokenGone(err) && !missing) || ctx.Err() != nil {
			return err
		}
		// The token expired, or @original is still missing after the retries (a moderator deleted
		// it, or the deferral never reached Discord): from now on, the channel.
		r.dropToken()
		if r.ephemeral {
			return fmt.Errorf("%w: the interaction's token no longer works: %w", bot.ErrNoPrivate, err)
		}
	} else if r.ephemeral {
		return fmt.Errorf("%w: no interaction token", bot.ErrNoPrivate)
	}
	if err := r.ensureThread(ctx); err != nil {
		return err
	}
	return withRetry(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, postTimeout)
		defer cancel()
		_, err := r.a.s.ChannelMessageSendComplex(r.channel, &discordgo.MessageSend{
			Content: text, Files: rewind(files), AllowedMentions: noMentions,
		}, discordgo.WithContext(ctx), discordgo.WithRetryOnRatelimit(false))
		return err
	})
}

func (r *replier) sendInteraction(ctx context.Context, token, text string, files []*discordgo.File) error {
	ctx, cancel := context.WithTimeout(ctx, postTimeout)
	defer cancel()
	in := &discordgo.Interaction{AppID: r.a.opts.ApplicationID, Token: token}
	opts := []discordgo.RequestOption{discordgo.WithContext(ctx), discordgo.WithRetryOnRatelimit(false)}
	r.mu.Lock()
	answered := r.answered
	r.mu.Unlock()
	if !answered {
		_, err := r.a.s.InteractionResponseEdit(in, &discordgo.WebhookEdit{Content: &text, Files: rewind(files), AllowedMentions: noMentions}, opts...)
		if err == nil {
			r.mu.Lock()
			r.answered = true
			r.mu.Unlock()
		}
		if restCode(err) == 10008 {
			// An HTTP interaction's deferral is in our HTTP answer: Discord may not have made
			// @original yet when the first edit arrives.
			return &notYet{err: err}
		}
		return err
	}
	params := &discordgo.WebhookParams{Content: text, Files: rewind(files), AllowedMentions: noMentions}
	if r.ephemeral {
		params.Flags = discordgo.MessageFlagsEphemeral
	}
	_, err := r.a.s.FollowupMessageCreate(in, true, params, opts...)
	return err
}

// rewind makes files readable again for a retry.
func rewind(files []*discordgo.File) []*discordgo.File {
	for _, f := range files {
		if s, ok := f.Reader.(*bytes.Reader); ok {
			_, _ = s.Seek(0, 0)
		}
	}
	return files
}

// PostPrivate implements bot.PrivatePoster: in an interaction, an ephemeral follow-up; in a DM, a
// post (only its user sees it). Elsewhere Discord has no message only one user sees:
// bot.ErrNoPrivate, and the caller decides what is posted.
func (r *replier) PostPrivate(ctx context.Context, _ string, text string) error {
	tok := r.interactionToken(ctx)
	if tok == "" {
		if r.dm {
			return r.Post(ctx, text)
		}
		return bot.ErrNoPrivate
	}
	// Always a follow-up: @original may be public.
	priv := &replier{a: r.a, channel: r.channel, token: tok, ephemeral: true, answered: true}
	if err := priv.Post(ctx, text); err != nil {
		if errors.Is(err, bot.ErrNoPrivate) && r.dm {
			return r.Post(ctx, text)
		}
		return err
	}
	if !r.ephemeral && !r.answeredNow() {
		// A public @original still "thinking" would never be answered (a refusal or an admin
		// command's output is all there is): it says where the answer went, not what it is.
		r.resolveOriginal(ctx, tok, privatelyAnswered)
	}
	return nil
}

// privatelyAnswered replaces a public @original whose command was answered only privately.
const privatelyAnswered = "Answered privately."

// resolveOriginal edits @original to text, once, unless something answered it already.
func (r *replier) resolveOriginal(ctx context.Context, tok, text string) {
	ctx, cancel := context.WithTimeout(ctx, editTimeout)
	defer cancel()
	_, err := r.a.s.InteractionResponseEdit(&discordgo.Interaction{AppID: r.a.opts.ApplicationID, Token: tok},
		&discordgo.WebhookEdit{Content: &text, AllowedMentions: noMentions}, discordgo.WithContext(ctx), discordgo.WithRetryOnRatelimit(false))
	if err != nil {
		r.a.log.Warn("resolving an interaction's @original", zap.Error(err))
		return
	}
	r.mu.Lock()
	r.answered = true
	r.mu.Unlock()
}

// interactionToken waits for the deferral, then returns the token ("" once it proved useless).
func (r *replier) interactionToken(ctx context.Context) string {
	if r.ready != nil {
		select {
		case <-r.ready:
		case <-ctx.Done():
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.token
}

// dropToken sends every later reply to the channel.
func (r *replier) dropToken() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.token = ""
}

func (r *replier) answeredNow() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.answered
}

// Progress implements bot.Replier: one message edited in place (in an interaction, @original until
// the answer replaces it). It never waits: a 429 comes back as *bot.RateLimitedError and the
// coalescer holds off while the turn goes on.
func (r *replier) Progress(ctx context.Context, text string) error {
	r.mu.Lock()
	wait := time.Until(r.progressAfter)
	replaced := r.answered && r.progressOnOriginal && r.progressID == ""
	r.mu.Unlock()
	if replaced {
		// The answer took @original, the progress message: a late update (the final state sent
		// again after a 429) has nothing to edit, and a new message would trail the answer.
		return nil
	}
	if wait > 0 {
		return &bot.RateLimitedError{RetryAfter: wait}
	}
	ctx, cancel := context.WithTimeout(ctx, editTimeout)
	defer cancel()
	opts := []discordgo.RequestOption{discordgo.WithContext(ctx), discordgo.WithRetryOnRatelimit(false)}
	r.typing(ctx)
	var err error
	if tok := r.interactionToken(ctx); tok != "" && !r.answeredNow() {
		_, err = r.a.s.InteractionResponseEdit(&discordgo.Interaction{AppID: r.a.opts.ApplicationID, Token: tok},
			&discordgo.WebhookEdit{Content: &text, AllowedMentions: noMentions}, opts...)
		if err == nil {
			r.mu.Lock()
			r.progressOnOriginal = true
			r.mu.Unlock()
		}
		if tokenGone(err) && !r.ephemeral {
			// A turn past the token's 15 minutes: progress (and the answer) go to the channel.
			r.dropToken()
			err = r.progressInChannel(ctx, text, opts)
		}
	} else {
		err = r.progressInChannel(ctx, text, opts)
	}
	if rl, ok := errors.AsType[*discordgo.RateLimitError](err); ok {
		wait := progressHoldOff(rl)
		r.mu.Lock()
		r.progressAfter = time.Now().Add(wait)
		r.mu.Unlock()
		return &bot.RateLimitedError{RetryAfter: wait}
	}
	if err != nil {
		return fmt.Errorf("discord: progress: %w", err)
	}
	return nil
}

// progressInChannel posts or edits the progress message in the channel.
func (r *replier) progressInChannel(ctx context.Context, text string, opts []discordgo.RequestOption) error {
	if err := r.ensureThread(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	id := r.progressID
	r.mu.Unlock()
	if id != "" {
		_, err := r.a.s.ChannelMessageEditComplex(&discordgo.MessageEdit{ID: id, Channel: r.channel, Content: &text, AllowedMentions: noMentions}, opts...)
		return err
	}
	m, err := r.a.s.ChannelMessageSendComplex(r.channel, &discordgo.MessageSend{Content: text, AllowedMentions: noMentions}, opts...)
	if err == nil {
		r.mu.Lock()
		r.progressID = m.ID
		r.mu.Unlock()
	}
	return err
}

// typing shows the typing indicator, renewed at most every typingEvery; failures only cost the hint.
func (r *replier) typing(ctx context.Context) {
	r.mu.Lock()
	due := time.Since(r.lastTyping) >= typingEvery && r.token == ""
	if due {
		r.lastTyping = time.Now()
	}
	r.mu.Unlock()
	if !due || r.ensureThread(ctx) != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, editTimeout)
	defer cancel()
	_ = r.a.s.ChannelTyping(r.channel, discordgo.WithContext(ctx), discordgo.WithRetryOnRatelimit(false))
}

// Upload implements bot.Replier: a message with the file as multipart files[0] and payload_json.
// The name goes into the part's Content-Disposition header, which discordgo escapes only for
// quotes: a CR/LF would add header lines, so it is sanitised here whatever the caller did.
func (r *replier) Upload(ctx context.Context, name string, data []byte) (string, error) {
	name = bot.FileName(name)
	size := int64(len(data))
	if size > r.a.opts.MaxFileBytes {
		return "", fmt.Errorf("%s is over Discord's upload limit of %s", bot.HumanSize(size), bot.HumanSize(r.a.opts.MaxFileBytes))
	}
	ctx, cancel := context.WithTimeout(ctx, uploadTimeout)
	defer cancel()
	f := &discordgo.File{Name: name, ContentType: "application/octet-stream", Reader: bytes.NewReader(data)}
	if err := r.send(ctx, "", []*discordgo.File{f}); err != nil {
		return "", fmt.Errorf("discord: uploading %s: %w", name, err)
	}
	return name, nil
}

// React implements bot.Replier on the message being answered (interactions have none). The final
// ✅ or ❌ replaces the 👀 of receipt.
func (r *replier) React(ctx context.Context, name string) error {
	if r.reactMsg == "" {
		return nil
	}
	e, ok := emoji[name]
	if !ok {
		return fmt.Errorf("discord: unknown reaction %q", name)
	}
	ctx, cancel := context.WithTimeout(ctx, editTimeout)
	defer cancel()
	if err := r.a.s.MessageReactionAdd(r.reactChannel, r.reactMsg, e, discordgo.WithContext(ctx)); err != nil {
		return fmt.Errorf("discord: reaction %s: %w", name, err)
	}
	if name == bot.ReactDone || name == bot.ReactError {
		if err := r.a.s.MessageReactionRemove(r.reactChannel, r.reactMsg, emoji[bot.ReactSeen], "@me", discordgo.WithContext(ctx)); err != nil {
			return fmt.Errorf("discord: removing %s: %w", bot.ReactSeen, err)
		}
	}
	return nil
}

// Limits implements bot.Replier.
func (r *replier) Limits() bot.Limits { return r.a.Limits() }

// notYet is an error worth a short wait and another try.
type notYet struct{ err error }

func (e *notYet) Error() string { return e.err.Error() }
func (e *notYet) Unwrap() error { return e.err }

// notYetWait is the pause before retrying a notYet.
const notYetWait = 250 * time.Millisecond

// retry waits out a 429's retry_after (up to maxRetryWait each, unknownRetryWait for none), and a
// notYet's short pause, a few times.
var retry = bot.RetryPolicy{Attempts: postAttempts, MaxWait: maxRetryWait, Wait: func(err error) (time.Duration, bool) {
	if rl, ok := errors.AsType[*discordgo.RateLimitError](err); ok {
		return retryAfter(rl), true
	}
	if _, ok := errors.AsType[*notYet](err); ok {
		return notYetWait, true
	}
	return 0, false
}}

// unknownRetryWait stands for a 429's retry_after that says nothing usable: 0, negative, or one
// discordgo could not convert (it turns 1e300 seconds into 0). Calling again at once would only
// spend the attempts against the same limit.
const unknownRetryWait = time.Second

// retryAfter is the wait a 429 asks for, or unknownRetryWait when it asks for none.
func retryAfter(rl *discordgo.RateLimitError) time.Duration {
	if rl.RateLimit == nil || rl.TooManyRequests == nil || rl.RetryAfter <= 0 {
		return unknownRetryWait
	}
	return rl.RetryAfter
}

// progressHoldOff is how long progress waits after a 429: what it asks for, at most maxRetryWait
// (a giant retry_after must not silence a turn's progress to its end).
func progressHoldOff(rl *discordgo.RateLimitError) time.Duration {
	return min(retryAfter(rl), maxRetryWait)
}

// withRetry runs f under retry.
func withRetry(ctx context.Context, f func(ctx context.Context) error) error { return retry.Do(ctx, f) }
