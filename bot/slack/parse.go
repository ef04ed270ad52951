package slack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/threadbox/threadbox/bot"
)

// errMalformed marks a request body that is not a usable Slack payload.
var errMalformed = errors.New("malformed Slack payload")

// envelope is the outer Events API body (also a Socket Mode events_api payload). Only the fields the
// adapter uses are read.
type envelope struct {
	Type      string          `json:"type"`
	Challenge string          `json:"challenge"`
	TeamID    string          `json:"team_id"`
	EventID   string          `json:"event_id"`
	Event     json.RawMessage `json:"event"`
}

// event is the inner event. It is read with our own small struct rather than slackevents.ParseEvent:
// since v0.34 that rejects a whole event over one malformed block, and a user's mention must not be
// lost to a block we never read.
type event struct {
	Type        string `json:"type"`
	Subtype     string `json:"subtype"`
	User        string `json:"user"`
	BotID       string `json:"bot_id"`
	Text        string `json:"text"`
	TS          string `json:"ts"`
	ThreadTS    string `json:"thread_ts"`
	Channel     string `json:"channel"`
	ChannelType string `json:"channel_type"`
	Team        string `json:"team"`
	// UserTeam and SourceTeam name the sender's workspace, which in a Slack Connect channel is not
	// the envelope's team_id (ours).
	UserTeam   string          `json:"user_team"`
	SourceTeam string          `json:"source_team"`
	Hidden     bool            `json:"hidden"`
	Files      json.RawMessage `json:"files"`
	// Edited is set on an app_mention that Slack sends again because its message was edited.
	Edited json.RawMessage `json:"edited"`
}

// slackFile is one entry of an event's files.
type slackFile struct {
	ID                 string `json:"id"`
	Name               string `json:"name"`
	Title              string `json:"title"`
	Mimetype           string `json:"mimetype"`
	Size               int64  `json:"size"`
	Mode               string `json:"mode"`
	FileAccess         string `json:"file_access"`
	URLPrivate         string `json:"url_private"`
	URLPrivateDownload string `json:"url_private_download"`
}

// parseEnvelope reads the outer body. An event_callback must carry an event_id and an event object.
func parseEnvelope(body []byte) (envelope, error) {
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return envelope{}, fmt.Errorf("%w: %w", errMalformed, err)
	}
	if env.Type == "" {
		return envelope{}, fmt.Errorf("%w: no type", errMalformed)
	}
	if env.Type == "event_callback" {
		if env.EventID == "" {
			return envelope{}, fmt.Errorf("%w: event_callback without event_id", errMalformed)
		}
		if t := bytes.TrimSpace(env.Event); len(t) == 0 || t[0] != '{' {
			return envelope{}, fmt.Errorf("%w: event_callback %s without an event object", errMalformed, env.EventID)
		}
	}
	return env, nil
}

// parseEvent reads the inner event.
func parseEvent(raw json.RawMessage) (event, error) {
	var ev event
	if err := json.Unmarshal(raw, &ev); err != nil {
		return event{}, fmt.Errorf("%w: inner event: %w", errMalformed, err)
	}
	return ev, nil
}

// files reads the event's attachments.
func (ev event) files() ([]slackFile, error) {
	if len(ev.Files) == 0 || string(ev.Files) == "null" {
		return nil, nil
	}
	var fs []slackFile
	if err := json.Unmarshal(ev.Files, &fs); err != nil {
		return nil, fmt.Errorf("%w: files: %w", errMalformed, err)
	}
	return fs, nil
}

// kind is what an event means to the bot.
type kind int

const (
	kindIgnore kind = iota
	// kindMention is an app_mention in a channel or thread.
	kindMention
	// kindDM is a message in the bot's DM with a user (message.im).
	kindDM
	// kindFollowUp is a thread reply without a mention; it counts only with FollowUps, in a thread
	// that has a session.
	kindFollowUp
)

func (k kind) String() string {
	return [...]string{"ignore", "mention", "dm", "follow-up"}[k]
}

// personSubtypes are the message subtypes a person types: a plain message, one with files, a thread
// reply also sent to the channel ("Also send to #channel" stamps it thread_broadcast, the mention's
// app_mention included), and /me. Every other subtype is Slack reporting a change.
var personSubtypes = map[string]bool{"": true, "file_share": true, "thread_broadcast": true, "me_message": true}

// classify decides what an event is from the event alone. botUserID may be "" while the identity is
// unknown; own messages still carry bot_id. why explains an ignore, for debug logs.
func classify(ev event, botUserID string) (k kind, why string) {
	switch {
	case ev.BotID != "":
		return kindIgnore, "from a bot"
	case botUserID != "" && ev.User == botUserID:
		return kindIgnore, "the bot's own message"
	case ev.User == "":
		return kindIgnore, "no user"
	case !personSubtypes[ev.Subtype]:
		// Edits, deletions, joins, topic changes…: none is a new request.
		return kindIgnore, "subtype " + ev.Subtype
	case ev.Hidden:
		return kindIgnore, "hidden"
	case len(ev.Edited) > 0 && string(ev.Edited) != "null":
		// An edit of a mention comes as app_mention again, under the message's own ts: not a new
		// request, and a command in it (reset, stop) must not run twice.
		return kindIgnore, "edited"
	case ev.Channel == "" || ev.TS == "":
		return kindIgnore, "no channel or ts"
	}
	switch ev.Type {
	case "app_mention":
		return kindMention, ""
	case "message":
		if ev.ChannelType == "im" {
			return kindDM, ""
		}
		if botUserID != "" && strings.Contains(ev.Text, "<@"+botUserID) {
			// The same message also arrives as app_mention; that one is answered.
			return kindIgnore, "mentions the bot (handled as app_mention)"
		}
		if ev.ThreadTS == "" || ev.ThreadTS == ev.TS {
			return kindIgnore, "not a thread reply"
		}
		return kindFollowUp, ""
	}
	return kindIgnore, "event type " + ev.Type
}

// threadOf derives the conversation key and where replies go. A channel thread is keyed by its
// root's ts (thread_ts, or the message's own ts when it starts the thread) and answered in that
// thread. All of a user's DMs share one key (one sandbox per DM user); replies go top level unless the
// user wrote inside a DM thread.
func threadOf(team string, ev event, k kind) (key bot.ThreadKey, replyTS string) {
	if k == kindDM {
		return bot.SlackDM(team, ev.User), ev.ThreadTS
	}
	root := ev.ThreadTS
	if root == "" {
		root = ev.TS
	}
	return bot.SlackThread(team, ev.Channel, root), root
}

// messageKey names a message across event types and event ids: Slack can deliver one message as
// app_mention and message.channels, or twice with different event ids.
func messageKey(team string, ev event) string {
	return "slack:" + team + ":" + ev.Channel + ":" + ev.TS
}

// markup is Slack's control sequences in message text: <@U…>, <#C…|name>, <!here>, <url|label>.
// Users' own < and > arrive escaped, so every literal angle bracket pair is markup.
var markup = regexp.MustCompile(`<([^<>]*)>`)

var unescaper = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&")

// plainText turns message text into what the agent should read: the bot's own mention removed, other
// markup rendered as people write it (@name, #channel, the bare URL), and &amp; &lt; &gt; unescaped,
// so "echo a > b" reaches a shell as typed. If botUserID is unknown, a mention's leading <@…> is
// taken to be the bot.
func plainText(text, botUserID string, isMention bool) string {
	if botUserID == "" && isMention {
		if m := markup.FindStringSubmatchIndex(strings.TrimSpace(text)); m != nil && m[0] == 0 {
			inner := strings.TrimSpace(text)[m[2]:m[3]]
			if id, ok := strings.CutPrefix(inner, "@"); ok {
				botUserID, _, _ = strings.Cut(id, "|")
			}
		}
	}
	out := markup.ReplaceAllStringFunc(text, func(m string) string {
		target, label, hasLabel := strings.Cut(m[1:len(m)-1], "|")
		switch {
		case strings.HasPrefix(target, "@"):
			if botUserID != "" && target[1:] == botUserID {
				return ""
			}
			if hasLabel {
				return "@" + strings.TrimPrefix(label, "@")
			}
			return target
		case strings.HasPrefix(target, "#"):
			if hasLabel {
				return "#" + label
			}
			return target
		case strings.HasPrefix(target, "!"):
			if hasLabel {
				return label
			}
			return "@" + strings.TrimPrefix(target, "!")
		case strings.HasPrefix(target, "mailto:"):
			return strings.TrimPrefix(target, "mailto:")
		}
		return target
	})
	return strings.TrimSpace(unescaper.Replace(out))
}
