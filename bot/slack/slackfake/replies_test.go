package slackfake_test

import (
	"testing"

	"github.com/slack-go/slack"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot/slack/slackfake"
)

// TestConversationsReplies drives conversations.replies through slack-go: range bounds, the root
// always first, pagination by cursor until has_more is false, and Slack's error codes.
func TestConversationsReplies(t *testing.T) {
	f, api := newFake(t, slackfake.Options{})
	ctx := t.Context()
	root := f.ChannelMessage("C1", "U1", "the build is red")
	alert := f.BotPost("C1", "B0CI", "ci-bot", "job 42 failed", slackfake.InThread(root.TS))
	var replies []string
	for _, text := range []string{"r1", "r2", "r3", "r4"} {
		replies = append(replies, f.ChannelMessage("C1", "U2", text, slackfake.InThread(root.TS)).TS)
	}
	f.ChannelMessage("C2", "U1", "elsewhere")

	texts := func(msgs []slack.Message) []string {
		var out []string
		for _, m := range msgs {
			out = append(out, m.Text)
		}
		return out
	}
	tests := []struct {
		name   string
		params slack.GetConversationRepliesParameters
		want   []string
	}{
		{"whole thread", slack.GetConversationRepliesParameters{Timestamp: root.TS}, []string{"the build is red", "job 42 failed", "r1", "r2", "r3", "r4"}},
		{"ts of a reply names its thread", slack.GetConversationRepliesParameters{Timestamp: replies[1]}, []string{"the build is red", "job 42 failed", "r1", "r2", "r3", "r4"}},
		{"latest is exclusive", slack.GetConversationRepliesParameters{Timestamp: root.TS, Latest: replies[2]}, []string{"the build is red", "job 42 failed", "r1", "r2"}},
		{"inclusive keeps latest", slack.GetConversationRepliesParameters{Timestamp: root.TS, Latest: replies[2], Inclusive: true}, []string{"the build is red", "job 42 failed", "r1", "r2", "r3"}},
		{"the root comes whatever oldest says", slack.GetConversationRepliesParameters{Timestamp: root.TS, Oldest: replies[2]}, []string{"the build is red", "r4"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.params
			p.ChannelID = "C1"
			msgs, more, next, err := api.GetConversationRepliesContext(ctx, &p)
			require.NoError(t, err)
			require.False(t, more)
			require.Empty(t, next)
			require.Equal(t, tc.want, texts(msgs))
		})
	}

	t.Run("wire fields", func(t *testing.T) {
		msgs, _, _, err := api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: "C1", Timestamp: root.TS})
		require.NoError(t, err)
		require.Equal(t, root.TS, msgs[0].ThreadTimestamp)
		require.Equal(t, 5, msgs[0].ReplyCount)
		require.Equal(t, "U1", msgs[0].User)
		require.Equal(t, alert.TS, msgs[1].Timestamp)
		require.Equal(t, "B0CI", msgs[1].BotID)
		require.Equal(t, "ci-bot", msgs[1].Username)
		require.Equal(t, "bot_message", msgs[1].SubType)
		require.Empty(t, msgs[1].User)
	})

	t.Run("pages by cursor", func(t *testing.T) {
		var got []string
		params := slack.GetConversationRepliesParameters{ChannelID: "C1", Timestamp: root.TS, Limit: 2}
		pages := 0
		for {
			msgs, more, next, err := api.GetConversationRepliesContext(ctx, &params)
			require.NoError(t, err)
			require.LessOrEqual(t, len(msgs), 2)
			got = append(got, texts(msgs)...)
			pages++
			require.Equal(t, more, next != "", "has_more and next_cursor agree")
			if !more {
				break
			}
			params.Cursor = next
		}
		require.Equal(t, 3, pages)
		require.Equal(t, []string{"the build is red", "job 42 failed", "r1", "r2", "r3", "r4"}, got)
	})

	errs := []struct {
		name   string
		params slack.GetConversationRepliesParameters
		code   string
	}{
		{"unknown channel", slack.GetConversationRepliesParameters{ChannelID: "C404", Timestamp: root.TS}, "channel_not_found"},
		{"unknown ts", slack.GetConversationRepliesParameters{ChannelID: "C1", Timestamp: "1.000001"}, "thread_not_found"},
		{"thread of another channel", slack.GetConversationRepliesParameters{ChannelID: "C2", Timestamp: root.TS}, "thread_not_found"},
		{"bad cursor", slack.GetConversationRepliesParameters{ChannelID: "C1", Timestamp: root.TS, Cursor: "bm9wZQ=="}, "invalid_cursor"},
		{"bad latest", slack.GetConversationRepliesParameters{ChannelID: "C1", Timestamp: root.TS, Latest: "yesterday"}, "invalid_ts_latest"},
		{"bad oldest", slack.GetConversationRepliesParameters{ChannelID: "C1", Timestamp: root.TS, Oldest: "x"}, "invalid_ts_oldest"},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := api.GetConversationRepliesContext(ctx, &tc.params)
			require.Equal(t, tc.code, slackErr(t, err))
		})
	}

	t.Run("injected fault", func(t *testing.T) {
		f.Fail("conversations.replies", 1, "missing_scope")
		_, _, _, err := api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: "C1", Timestamp: root.TS})
		require.Equal(t, "missing_scope", slackErr(t, err))
	})
}
