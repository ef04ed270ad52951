package slack

import (
	"os"
	"testing"

	"github.com/threadbox/threadbox/bot/slack/slackfake"
)

// TestMain lets this test binary serve as a slackfake.Peer (the benchmarks' Slack, in a process of
// its own) when started as one.
func TestMain(m *testing.M) {
	slackfake.ServePeerIfAsked()
	os.Exit(m.Run())
}
