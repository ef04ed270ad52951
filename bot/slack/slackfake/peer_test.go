package slackfake_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot/slack/slackfake"
)

func TestMain(m *testing.M) {
	slackfake.ServePeerIfAsked()
	os.Exit(m.Run())
}

// TestPeer drives a fake Slack in a process of its own: its events arrive signed with its secret, on
// schedule, its latencies and failures are counted, and its Web API records what the bot does.
func TestPeer(t *testing.T) {
	peer, err := slackfake.StartPeer(context.Background(), slackfake.Options{SigningSecret: "peer-secret"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, peer.Close()) })
	require.Equal(t, "peer-secret", peer.Options().SigningSecret)
	api := slack.New(peer.Options().BotToken, slack.OptionAPIURL(peer.APIURL()))

	var (
		mu    sync.Mutex
		users = map[string]int{}
	)
	bot := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := slack.NewSecretsVerifier(r.Header, "peer-secret")
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(io.TeeReader(r.Body, &v))
		if v.Ensure() != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var env struct {
			Event struct{ User, Channel, TS, Text string } `json:"event"`
		}
		if err := json.Unmarshal(body, &env); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		users[env.Event.User]++
		mu.Unlock()
		if env.Event.User == "U2" {
			http.Error(w, "refused", http.StatusServiceUnavailable)
			return
		}
		if err := api.AddReactionContext(r.Context(), "white_check_mark", slack.NewRefToMessage(env.Event.Channel, env.Event.TS)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}))
	t.Cleanup(bot.Close)

	lat, errs, err := peer.Burst(bot.URL, slackfake.Burst{N: 30, Rate: 1000, Prefix: "C", Threads: 4, Users: 3, Text: "hi"})
	require.NoError(t, err)
	require.Len(t, lat, 30)
	for i, d := range lat {
		require.Positive(t, d, "event %d", i)
	}
	require.Equal(t, 10, errs, "U2's ten events were refused")
	require.Equal(t, map[string]int{"U0": 10, "U1": 10, "U2": 10}, users)
	n, err := peer.WaitReactions("white_check_mark", 20, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 20, n)
	n, err = peer.WaitReactions("white_check_mark", 19, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 20, n, "how many there are, past the count waited for")
	_, err = peer.WaitReactions("white_check_mark", 21, time.Millisecond)
	require.ErrorContains(t, err, "20 of 21")
}
