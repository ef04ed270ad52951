package slack

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/slack-go/slack"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
)

// TestTransientSlackErrors: Slack's "try later" answers are worth a post again later (the pool
// reposts a reply none of which got through only then); its refusals are not.
func TestTransientSlackErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"429":                     {&slack.RateLimitedError{}, true},
		"500":                     {slack.StatusCodeError{Code: http.StatusInternalServerError}, true},
		"ok:false ratelimited":    {slack.SlackErrorResponse{Err: "ratelimited"}, true},
		"message_limit_exceeded":  {slack.SlackErrorResponse{Err: "message_limit_exceeded"}, true},
		"service_unavailable":     {fmt.Errorf("post: %w", slack.SlackErrorResponse{Err: "service_unavailable"}), true},
		"channel_not_found":       {slack.SlackErrorResponse{Err: "channel_not_found"}, false},
		"is_archived":             {slack.SlackErrorResponse{Err: "is_archived"}, false},
		"403":                     {slack.StatusCodeError{Code: http.StatusForbidden}, false},
		"something else entirely": {errors.New("boom"), false},
	} {
		require.Equal(t, tc.want, bot.RetryLater(transient(tc.err)), name)
	}
}
