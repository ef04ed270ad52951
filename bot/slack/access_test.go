package slack

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/bot/slack/slackfake"
)

// TestTeamAllowlistJudgesTheSender: access.slack_teams is checked against the sender's workspace
// (user_team, else the event's team, else source_team, else the envelope's team_id). The envelope's
// team_id is the workspace the bot is installed in: in a Slack Connect channel, a person from an
// outside organisation came with our team_id and passed the allowlist.
func TestTeamAllowlistJudgesTheSender(t *testing.T) {
	const home, outside = "T0FAKE", "T0OUTSIDE"
	for _, tc := range []struct {
		name   string
		fields map[string]any
		admit  bool
	}{
		{"same-team user", map[string]any{"user_team": home, "team": home}, true},
		{"outside-org user in a shared channel",
			map[string]any{"user_team": outside, "team": outside, "source_team": outside}, false},
		{"outsider named by team alone", map[string]any{"team": outside}, false},
		{"outsider named by source_team alone", map[string]any{"team": nil, "source_team": outside}, false},
		{"user_team wins over team", map[string]any{"user_team": outside, "team": home}, false},
		{"user_team of our workspace wins", map[string]any{"user_team": home, "team": outside}, true},
		{"no sender team: the envelope's", map[string]any{"team": nil}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := bot.NewHandler(bot.HandlerConfig{Access: bot.AccessPolicy{SlackTeams: []string{home}}}, nil, nil, nil,
				zaptest.NewLogger(t))
			hs := newHarness(t, nil, h)
			ev := hs.fake.Mention("C1", "U1", "help", slackfake.WithFields(tc.fields))
			hs.deliver(t, ev)
			ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
			defer cancel()
			require.NoError(t, h.Wait(ctx))
			waitFake(t, hs.fake, "an answer", func() bool {
				return len(hs.fake.Replies("C1", ev.TS)) > 0 || len(hs.fake.Ephemerals("C1")) > 0
			})
			if tc.admit {
				require.Empty(t, h.Refusals())
				require.Empty(t, hs.fake.Ephemerals("C1"))
				require.True(t, strings.HasPrefix(botText(hs.fake.Replies("C1", ev.TS)), "I run an AI coding agent"))
				return
			}
			require.Equal(t, map[string]int64{bot.RefusedTeam: 1}, h.Refusals())
			eph := hs.fake.Ephemerals("C1")
			require.Len(t, eph, 1, "refused privately, as before")
			require.Equal(t, "U1", eph[0].User)
			require.Contains(t, eph[0].Text, "not enabled for this workspace")
			require.Empty(t, botText(hs.fake.Replies("C1", ev.TS)), "nothing in the thread")
		})
	}
}

// botText is what the bot posted among msgs.
func botText(msgs []slackfake.Message) string {
	var out []string
	for _, m := range msgs {
		if m.BotID != "" {
			out = append(out, m.Text)
		}
	}
	return strings.Join(out, "\n")
}

// policed is a stub handler behind a real access policy, as bot.Handler applies it: a refused message
// is counted (Refusal) and goes no further.
type policed struct {
	bot.Gate
	stub *stubHandler
}

func (p policed) Handle(ctx context.Context, msg bot.Message, r bot.Replier) error {
	if p.Refusal(msg) != "" {
		return nil
	}
	return p.stub.Handle(ctx, msg, r)
}

// TestRefusedStrangersSpendNoRateLimit: the access policy is decided before the rate limit. Refused
// strangers used up the channel's budget (locking the people it admits out of the channel), and past
// it drew the public "skipping messages" notice and 🚫 marks, for messages that were refused anyway.
func TestRefusedStrangersSpendNoRateLimit(t *testing.T) {
	clock := &fakeClock{now: windowStart()}
	policy := bot.NewHandler(bot.HandlerConfig{Access: bot.AccessPolicy{Users: []string{"slack:UOK"}}}, nil, nil, nil,
		zaptest.NewLogger(t))
	stub := newStubHandler()
	hs := newHarness(t, nil, policed{policy, stub}, func(o *Options) {
		o.Now = clock.Now
		o.RateLimit = RateLimit{UserMessages: -1, ChannelMessages: 2, Window: time.Hour}
	})
	const strangers = 5
	var refused []slackfake.Event
	for i := range strangers {
		ev := hs.fake.Mention("C1", fmt.Sprint("U", i), "let me in")
		hs.deliver(t, ev)
		refused = append(refused, ev)
	}
	for _, text := range []string{"one", "two"} {
		hs.deliver(t, hs.fake.Mention("C1", "UOK", text))
	}
	hs.drain(t)
	var got []string
	for _, m := range stub.messages() {
		got = append(got, m.User.ID+":"+m.Text)
	}
	require.Equal(t, []string{"UOK:one", "UOK:two"}, got, "the admitted user has the channel's whole budget")
	require.Equal(t, map[string]int64{bot.RefusedUser: strangers}, policy.Refusals(), "each refusal counted once")
	for _, ev := range refused {
		require.Empty(t, politeNotices(hs.fake, "C1", ev.TS), "no rate-limit notice for a refused stranger")
		require.NotContains(t, hs.fake.Reactions(ev.Channel, ev.TS), bot.ReactSkipped)
	}
}
