package slack

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/slack-go/slack"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
)

func TestPlainText(t *testing.T) {
	tests := []struct {
		name, in, bot string
		mention       bool
		want          string
	}{
		{"leading mention", "<@UBOT> echo hi", "UBOT", true, "echo hi"},
		{"mention with label", "<@UBOT|threadbox> ls", "UBOT", true, "ls"},
		{"mention mid-text", "please <@UBOT> run ls", "UBOT", true, "please  run ls"},
		{"only the mention", "<@UBOT>", "UBOT", true, ""},
		{"unknown bot id: leading mention is the bot", "<@UXYZ> uname -a", "", true, "uname -a"},
		{"unknown bot id in a DM keeps mentions", "<@UXYZ> hi", "", false, "@UXYZ hi"},
		{"other user", "<@UBOT> ask <@U2> and <@U3|bob>", "UBOT", true, "ask @U2 and @bob"},
		{"escapes", "<@UBOT> echo a &gt; b &amp;&amp; cat &lt; b", "UBOT", true, "echo a > b && cat < b"},
		{"escaped entity text stays literal", "echo &amp;lt;", "UBOT", false, "echo &lt;"},
		{"link", "curl <https://example.com/x?a=1&amp;b=2>", "UBOT", false, "curl https://example.com/x?a=1&b=2"},
		{"link with label", "open <https://example.com|example.com>", "UBOT", false, "open https://example.com"},
		{"mailto", "mail <mailto:a@b.c|a@b.c>", "UBOT", false, "mail a@b.c"},
		{"channel", "see <#C123|general> and <#C9>", "UBOT", false, "see #general and #C9"},
		{"special", "<!here> <!channel> <!subteam^S1|@ops> <!date^1392734382^{date}|Feb 18>", "UBOT", false, "@here @channel @ops Feb 18"},
		{"unicode", "<@UBOT> echo 日本語 🙂", "UBOT", true, "echo 日本語 🙂"},
		{"unbalanced brackets", "a <b <@UBOT> c", "UBOT", true, "a <b  c"},
		{"empty", "", "UBOT", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, plainText(tt.in, tt.bot, tt.mention))
		})
	}
}

func TestClassify(t *testing.T) {
	base := event{Type: "app_mention", User: "U1", Text: "<@UBOT> hi", TS: "1.000001", Channel: "C1"}
	mod := func(f func(*event)) event {
		e := base
		f(&e)
		return e
	}
	tests := []struct {
		name string
		ev   event
		bot  string
		want kind
	}{
		{"mention", base, "UBOT", kindMention},
		{"mention in a thread", mod(func(e *event) { e.ThreadTS = "0.5" }), "UBOT", kindMention},
		{"mention before the identity is known", base, "", kindMention},
		{"own message by user id", mod(func(e *event) { e.User = "UBOT" }), "UBOT", kindIgnore},
		{"own message by bot id", mod(func(e *event) { e.User = "UBOT"; e.BotID = "BBOT" }), "", kindIgnore},
		{"another bot", mod(func(e *event) { e.BotID = "B2" }), "UBOT", kindIgnore},
		{"edit", mod(func(e *event) { e.Type = "message"; e.Subtype = "message_changed" }), "UBOT", kindIgnore},
		{"bot_message subtype", mod(func(e *event) { e.Type = "message"; e.Subtype = "bot_message"; e.ChannelType = "im" }), "UBOT", kindIgnore},
		{"file share in a DM", mod(func(e *event) { e.Type = "message"; e.Subtype = "file_share"; e.ChannelType = "im" }), "UBOT", kindDM},
		{"dm", mod(func(e *event) { e.Type = "message"; e.ChannelType = "im"; e.Text = "hi" }), "UBOT", kindDM},
		{"hidden", mod(func(e *event) { e.Hidden = true }), "UBOT", kindIgnore},
		{"edited mention", mod(func(e *event) { e.Edited = json.RawMessage(`{"user":"U1","ts":"2.0"}`) }), "UBOT", kindIgnore},
		{"edited: null", mod(func(e *event) { e.Edited = json.RawMessage(`null`) }), "UBOT", kindMention},
		{"no user", mod(func(e *event) { e.User = "" }), "UBOT", kindIgnore},
		{"no ts", mod(func(e *event) { e.TS = "" }), "UBOT", kindIgnore},
		{"channel message with mention: app_mention answers it", mod(func(e *event) { e.Type = "message"; e.ChannelType = "channel"; e.ThreadTS = "0.5" }), "UBOT", kindIgnore},
		{"top-level channel message", mod(func(e *event) { e.Type = "message"; e.ChannelType = "channel"; e.Text = "hi" }), "UBOT", kindIgnore},
		{"thread reply", mod(func(e *event) { e.Type = "message"; e.ChannelType = "channel"; e.Text = "hi"; e.ThreadTS = "0.5" }), "UBOT", kindFollowUp},
		{"thread root is not a reply", mod(func(e *event) { e.Type = "message"; e.ChannelType = "group"; e.Text = "hi"; e.ThreadTS = e.TS }), "UBOT", kindIgnore},
		{"reaction event", mod(func(e *event) { e.Type = "reaction_added" }), "UBOT", kindIgnore},
		// "Also send to channel" stamps a thread reply thread_broadcast, mention or not.
		{"broadcast mention", mod(func(e *event) { e.Subtype = "thread_broadcast"; e.ThreadTS = "0.5" }), "UBOT", kindMention},
		{"broadcast thread reply", mod(func(e *event) {
			e.Type, e.Subtype, e.ChannelType, e.Text, e.ThreadTS = "message", "thread_broadcast", "channel", "hi", "0.5"
		}), "UBOT", kindFollowUp},
		{"/me in a DM", mod(func(e *event) { e.Type, e.Subtype, e.ChannelType = "message", "me_message", "im" }), "UBOT", kindDM},
		{"channel join", mod(func(e *event) { e.Type, e.Subtype, e.ChannelType = "message", "channel_join", "im" }), "UBOT", kindIgnore},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := classify(tt.ev, tt.bot)
			require.Equal(t, tt.want, got, why)
		})
	}
}

func TestThreadOf(t *testing.T) {
	ev := event{User: "U1", TS: "200.000002", Channel: "C1"}
	key, reply := threadOf("T1", ev, kindMention)
	require.Equal(t, bot.SlackThread("T1", "C1", "200.000002"), key, "a top-level mention starts a thread at its own ts")
	require.Equal(t, "200.000002", reply)
	require.Equal(t, "slack:T1:C1:200.000002", key.String())

	ev.ThreadTS = "100.000001"
	key, reply = threadOf("T1", ev, kindMention)
	require.Equal(t, "slack:T1:C1:100.000001", key.String(), "a mention in a thread is keyed to the root")
	require.Equal(t, "100.000001", reply)
	key, _ = threadOf("T1", ev, kindFollowUp)
	require.Equal(t, "slack:T1:C1:100.000001", key.String())

	dm := event{User: "U7", TS: "300.1", Channel: "D7"}
	key, reply = threadOf("T1", dm, kindDM)
	require.Equal(t, "slack:T1:dm:U7", key.String(), "all of a user's DMs share a key")
	require.True(t, key.IsDM())
	require.Empty(t, reply, "DM answers go top level")
	dm.ThreadTS = "299.1"
	_, reply = threadOf("T1", dm, kindDM)
	require.Equal(t, "299.1", reply, "…unless the user wrote in a DM thread")
	parsed, err := bot.ParseThreadKey(key.String())
	require.NoError(t, err)
	require.Equal(t, key, parsed)
}

func TestParseEnvelope(t *testing.T) {
	for name, body := range map[string]string{
		"not json":                  `event_callback`,
		"truncated":                 `{"type":"event_callback","event_id":"Ev1","event":{"type":"app_me`,
		"array":                     `[1,2,3]`,
		"no type":                   `{"event_id":"Ev1"}`,
		"callback without event id": `{"type":"event_callback","event":{"type":"app_mention"}}`,
		"callback without event":    `{"type":"event_callback","event_id":"Ev1"}`,
		"event is a string":         `{"type":"event_callback","event_id":"Ev1","event":"app_mention"}`,
		"event is null":             `{"type":"event_callback","event_id":"Ev1","event":null}`,
		"type is a number":          `{"type":7}`,
	} {
		_, err := parseEnvelope([]byte(body))
		require.ErrorIs(t, err, errMalformed, name)
	}
	env, err := parseEnvelope([]byte(`{"type":"event_callback","event_id":"Ev1","team_id":"T1","event":{"type":"app_mention"},"extra":{"x":[1]}}`))
	require.NoError(t, err)
	require.Equal(t, "Ev1", env.EventID)
}

// TestOddEvents sends malformed and unusual bodies through the HTTP handler: each gets a clear status
// (400 with X-Slack-No-Retry for an unusable body, so Slack does not retry it forever; 200 for a
// readable body the bot cannot use), nothing crashes, and nothing reaches the handler.
func TestOddEvents(t *testing.T) {
	h := newStubHandler()
	hs := newHarness(t, nil, h)
	post := func(body string) (int, http.Header) {
		res, err := hs.fake.PostSigned(t.Context(), hs.events, "application/json", []byte(body))
		require.NoError(t, err)
		return res.Status, res.Header
	}
	for name, body := range map[string]string{
		"not json":             `hello`,
		"empty":                ``,
		"no event_id":          `{"type":"event_callback","event":{"type":"app_mention","user":"U1","text":"x","ts":"1.1","channel":"C1"}}`,
		"event not an object":  `{"type":"event_callback","event_id":"EvX1","event":[1]}`,
		"deeply nested arrays": `{"type":"event_callback","event_id":"EvX2","event":` + nested(2000) + `}`,
	} {
		status, hdr := post(body)
		require.Equal(t, http.StatusBadRequest, status, name)
		require.Equal(t, "1", hdr.Get("X-Slack-No-Retry"), name)
	}
	for name, body := range map[string]string{
		"user is a number":   `{"type":"event_callback","event_id":"EvY1","team_id":"T","event":{"type":"app_mention","user":42,"text":"x","ts":"1.1","channel":"C1"}}`,
		"files not a list":   `{"type":"event_callback","event_id":"EvY2","team_id":"T","event":{"type":"app_mention","user":"U1","text":"<@U0BOT> x","ts":"1.2","channel":"C1","files":"nope"}}`,
		"unknown outer type": `{"type":"block_suggestion","token":"x"}`,
		"rate limited":       `{"token":"x","type":"app_rate_limited","team_id":"T","minute_rate_limited":1518467820,"api_app_id":"A"}`,
		"unknown inner type": `{"type":"event_callback","event_id":"EvY3","team_id":"T","event":{"type":"team_join","user":{"id":"U9"}}}`,
		"broken blocks":      `{"type":"event_callback","event_id":"EvY4","team_id":"T","event":{"type":"message","subtype":"message_changed","blocks":[{"type":"rich_text","elements":7}],"ts":"1.3","channel":"C1"}}`,
		"missing channel":    `{"type":"event_callback","event_id":"EvY5","team_id":"T","event":{"type":"app_mention","user":"U1","text":"x","ts":"1.4"}}`,
	} {
		status, _ := post(body)
		require.Equal(t, http.StatusOK, status, name)
	}
	// "files not a list": the mention itself is still answered, with a note about the attachments.
	msg := h.next(t)
	require.Equal(t, "x", msg.Text)
	require.Len(t, h.messages(), 1)

	res, err := hs.fake.URLVerification(t.Context(), hs.events, "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", string(res.Body))
}

func nested(n int) string {
	b := make([]byte, 0, 2*n)
	for range n {
		b = append(b, '[')
	}
	for range n {
		b = append(b, ']')
	}
	return string(b)
}

// FuzzParse feeds arbitrary bodies through everything the ack path runs: it never panics, only
// events with a user, channel and ts are acted on, their keys read back as stored, and the text the
// agent gets is never longer than the message (every rendering of markup shortens it).
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"type":"event_callback","event_id":"Ev1","team_id":"T","event":{"type":"app_mention","user":"U1","text":"<@U0BOT> <x|y> &amp;","ts":"1.1","channel":"C1","files":[{"id":"F1","size":-1}]}}`))
	f.Add([]byte(`{"type":"url_verification","challenge":"c"}`))
	f.Add([]byte(`{"type":"event_callback","event_id":"Ev1","event":{"type":"message","channel_type":"im","text":"<<<>>>"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := parseEnvelope(body)
		if err != nil || env.Type != "event_callback" {
			return
		}
		ev, err := parseEvent(env.Event)
		if err != nil {
			return
		}
		require.NotEmpty(t, env.EventID)
		k, why := classify(ev, "U0BOT")
		if k == kindIgnore {
			require.NotEmpty(t, why, "an ignore says why")
		} else {
			require.True(t, ev.User != "" && ev.Channel != "" && ev.TS != "" && ev.BotID == "" && ev.User != "U0BOT",
				"%s acted on: %+v", k, ev)
		}
		key, _ := threadOf(env.TeamID, ev, k)
		if k != kindIgnore && env.TeamID != "" && !strings.Contains(env.TeamID+ev.Channel+ev.TS+ev.ThreadTS+ev.User, ":") {
			back, err := bot.ParseThreadKey(key.String())
			require.NoError(t, err)
			require.Equal(t, key, back)
		}
		if fs, err := ev.files(); err == nil {
			require.LessOrEqual(t, len(fs), len(body))
		}
		plain := plainText(ev.Text, "U0BOT", k == kindMention)
		require.LessOrEqual(t, len(plain), len(ev.Text))
		require.True(t, json.Valid(body))
	})
}

// FuzzCommands feeds arbitrary slash command bodies to the SDK's parser, as serveCommands does after
// verification, and any admin output through formatCommandOutput: the reply stays within Socket
// Mode's limit, shows no markup (& < > escaped), and a fenced reply cannot be closed early.
func FuzzCommands(f *testing.F) {
	f.Add("command=%2Fthreadbox&text=admin+sessions&user_id=U1&trigger_id=T1&response_url=https%3A%2F%2Fx", "a\nb")
	f.Add("text=%3C%40U1%3E&user_id=", "```\n<script>&amp;\n```")
	f.Add("%zz=1&text", strings.Repeat("日本語 ", 3000))
	f.Fuzz(func(t *testing.T, body, output string) {
		r := httptest.NewRequest(http.MethodPost, "/slack/commands", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if cmd, err := slack.SlashCommandParse(r); err == nil {
			_ = strings.Fields(cmd.Text)
		}
		got := formatCommandOutput(output)
		enc, err := json.Marshal(got)
		require.NoError(t, err)
		require.LessOrEqual(t, len(enc), maxCommandJSON+200, "bytes as sent, not characters")
		require.False(t, strings.ContainsAny(got, "<>"), "markup reaches Slack: %q", got)
		if inner, ok := strings.CutPrefix(got, "```\n"); ok && strings.Contains(got, "\n") {
			inner, ok = strings.CutSuffix(inner, "\n```")
			require.True(t, ok, "a fenced reply ends with its fence")
			require.NotContains(t, inner, "```", "the output cannot close the fence early")
		}
	})
}
