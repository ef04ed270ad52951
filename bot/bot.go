// Package bot is the platform-neutral bot: thread keys, messages, the Replier every chat adapter
// implements, the Handler that routes messages to commands or to the agent pool, and the pieces that
// make answers fit a chat (progress coalescing, answer splitting).
//
// Chat SDK types never enter this package: each adapter (bot/slack, bot/discord, bot/web) maps its
// events to Message and implements Replier.
package bot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ThreadKey names one conversation, and so one sandbox. It is comparable and renders as the string
// stored in the database (DESIGN §1):
//
//	slack:<team>:<channel>:<thread_ts>   a channel thread, keyed by the root message's ts
//	slack:<team>:dm:<user>               all DMs with one user share a sandbox
//	discord:<guild>:<thread_channel_id>
//	discord:dm:<user>
//	web:<conversation_id>
type ThreadKey struct {
	Platform string
	// Scope is the workspace or guild; empty for web and Discord DMs.
	Scope string
	// Channel is the channel, or "dm".
	Channel string
	// Thread is the thread root, the DM user, or the web conversation.
	Thread string
}

// SlackThread is a channel thread's key.
func SlackThread(team, channel, threadTS string) ThreadKey {
	return ThreadKey{Platform: "slack", Scope: team, Channel: channel, Thread: threadTS}
}

// SlackDM is the key shared by all of one user's DMs.
func SlackDM(team, user string) ThreadKey {
	return ThreadKey{Platform: "slack", Scope: team, Channel: "dm", Thread: user}
}

// DiscordThread is a Discord thread channel's key.
func DiscordThread(guild, threadChannel string) ThreadKey {
	return ThreadKey{Platform: "discord", Scope: guild, Thread: threadChannel}
}

// DiscordDM is the key shared by all of one user's DMs.
func DiscordDM(user string) ThreadKey {
	return ThreadKey{Platform: "discord", Channel: "dm", Thread: user}
}

// WebThread is a web chat conversation's key.
func WebThread(conversation string) ThreadKey {
	return ThreadKey{Platform: "web", Thread: conversation}
}

// IsDM reports whether the key is a direct-message conversation.
func (k ThreadKey) IsDM() bool { return k.Channel == "dm" }

// String renders the key in its stored form.
func (k ThreadKey) String() string {
	parts := []string{k.Platform}
	for _, p := range []string{k.Scope, k.Channel} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(append(parts, k.Thread), ":")
}

// threadKeyForms says what a thread key looks like, for a refusal.
const threadKeyForms = "want slack:<team>:<channel>:<ts>, slack:<team>:dm:<user>, discord:<guild>:<thread>, discord:dm:<user> or web:<id>"

// ParseThreadKey reads a stored key back. It accepts exactly the forms String produces.
func ParseThreadKey(s string) (ThreadKey, error) {
	parts := strings.Split(s, ":")
	// s is the sender's text, of any length (the web API answers with this error): quote enough of it
	// to recognise, escaped.
	bad := fmt.Errorf("thread key %q: %s", cutText(s, maxQuotedKey), threadKeyForms)
	for _, p := range parts {
		if p == "" {
			return ThreadKey{}, bad
		}
	}
	switch {
	case parts[0] == "slack" && len(parts) == 4:
		return ThreadKey{Platform: "slack", Scope: parts[1], Channel: parts[2], Thread: parts[3]}, nil
	case parts[0] == "discord" && len(parts) == 3 && parts[1] == "dm":
		return DiscordDM(parts[2]), nil
	case parts[0] == "discord" && len(parts) == 3:
		return DiscordThread(parts[1], parts[2]), nil
	case parts[0] == "web" && len(parts) == 2:
		return WebThread(parts[1]), nil
	}
	return ThreadKey{}, bad
}

// User is who sent a message.
type User struct {
	// ID is the platform's user id.
	ID   string
	Name string
	// Team is the workspace the person belongs to, where the platform says so and it may differ from
	// the thread's (a Slack Connect channel holds people of other organisations); empty: Thread.Scope.
	Team string
}

// Qualified is the platform:id form used in admin.users.
func (u User) Qualified(platform string) string { return platform + ":" + u.ID }

// File is an attachment. Its bytes are fetched only when its turn runs, through Open (or, for a turn
// taken over from a process that died, through the adapter's Platform.OpenFile with Ref), so queued
// messages hold no attachment in memory.
type File struct {
	Name string
	// Size is the size the platform announced.
	Size int64
	// Ref is the adapter's durable reference (a download URL, a spool file) for Platform.OpenFile.
	Ref  string
	Open func(ctx context.Context) (io.ReadCloser, error)
	// Discard, when set, frees what the adapter holds for the file until it is read (a spool file).
	// Handler.Handle owns a message's files: it discards them when the message does not become a
	// turn, and the pool does when the turn ends without reading them.
	Discard func()
}

// discardFiles frees files no turn will read.
func discardFiles(files []File) {
	for _, f := range files {
		if f.Discard != nil {
			f.Discard()
		}
	}
}

// Message is one incoming message, already verified and deduplicated by its adapter.
type Message struct {
	Thread ThreadKey
	// ChannelID is the platform channel the reply goes to.
	ChannelID string
	// ParentChannelID is, for a thread that is a channel of its own (Discord), the channel it was
	// started in; access.channels matches either.
	ParentChannelID string
	User            User
	Text            string
	Files           []File
	// EventID is the platform's unique id for the event (the turn's dedupe key).
	EventID string
	// Reply is the adapter's encoding of where replies go, recorded with the turn so that another
	// process can answer it (Platform.Restore reads it back).
	Reply json.RawMessage
	// Notes are the adapter's remarks for the reply (attachments it could not use).
	Notes []string
	// Earlier, when set, is the thread before this message, read only if the turn is the thread's
	// first (earlier.go).
	Earlier *Earlier
	// replyEvent, when set, is the event a command reply to this message is recorded under: a
	// retry's turn is recorded as retry:<turn>, but a reply to the retry message is that message's.
	replyEvent string
}

// Limits are a platform's sizes.
type Limits struct {
	// MaxMessage is the longest message body the bot posts, in characters.
	MaxMessage int
	// MaxChunks is how many messages an answer may take before it goes as a file instead.
	MaxChunks int
	// MaxFileBytes is the largest upload.
	MaxFileBytes int64
}

// Reactions the handler uses; adapters map them to the platform's emoji.
const (
	ReactSeen  = "eyes"
	ReactDone  = "white_check_mark"
	ReactError = "x"
	// ReactSkipped marks a message the rate limit refused, so its sender sees which to send again.
	ReactSkipped = "no_entry_sign"
)

// Replier talks back into the thread a message came from. Implementations must be safe for
// concurrent use; they own rate limiting (a 429 makes Progress skip, never block the turn).
type Replier interface {
	// Post adds a message to the thread.
	Post(ctx context.Context, text string) error
	// Progress shows text in the thread's single progress message, creating it on first use.
	Progress(ctx context.Context, text string) error
	// Upload shares a file into the thread and returns the platform's file id.
	Upload(ctx context.Context, name string, data []byte) (string, error)
	// React adds a reaction to the message being answered (one of the React* names).
	React(ctx context.Context, name string) error
	// Limits reports the platform's sizes.
	Limits() Limits
}

// PrivatePoster is an optional Replier capability: a message in the thread that only userID sees
// (Slack's ephemeral messages). Admin replies use it, so session lists and sandbox handles stay out of
// threads other people read; a Replier without it is already private (the web chat).
type PrivatePoster interface {
	// PostPrivate returns an error wrapping ErrNoPrivate, having posted nothing, where the platform
	// has no private message (Discord outside an interaction): the caller decides what may be public.
	PostPrivate(ctx context.Context, userID, text string) error
}

// ErrNoPrivate is PostPrivate's answer where no message only one user sees can be posted.
var ErrNoPrivate = errors.New("no private message possible here")

// NoPrivateAdminText answers an admin command where its output cannot be shown privately.
const NoPrivateAdminText = "Admin commands answer privately: use the /threadbox slash command."

// MessageHandler takes the messages an adapter accepted; *Handler implements it.
type MessageHandler interface {
	Handle(ctx context.Context, msg Message, r Replier) error
}

// Gate is an optional capability of a MessageHandler (*Handler has it): the access policy alone, for
// an adapter that must act on the platform (start a thread) before the message exists to be handled.
type Gate interface {
	// Refusal applies the access policy to msg as Handle would, counting a refusal, and returns what
	// to tell the sender, or "" when msg is admitted.
	Refusal(msg Message) string
	// Admits applies the access policy to msg without counting or logging a refusal (Handle does that
	// once msg reaches it): adapters ask it before the rate limit, so that only admitted people spend
	// a channel's budget and a refused message draws no rate-limit notice.
	Admits(msg Message) bool
}

// Admits reports whether h lets msg through its access policy (Gate.Admits); a handler without a
// policy admits everything.
func Admits(h MessageHandler, msg Message) bool {
	g, ok := h.(Gate)
	return !ok || g.Admits(msg)
}

// AdminRunner runs admin commands for an actor ("platform:user"); *Admin implements it.
type AdminRunner interface {
	Run(ctx context.Context, actor string, argv []string) (string, error)
}
