package discord

import (
	"errors"
	"net/http"
	"testing"

	"github.com/bwmarrin/discordgo"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
)

// TestTransientDiscordErrors: Discord's "try later" answers are worth a post again later; its
// refusals are not.
func TestTransientDiscordErrors(t *testing.T) {
	rest := func(code int) error { return &discordgo.RESTError{Response: &http.Response{StatusCode: code}} }
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"429":            {&discordgo.RateLimitError{RateLimit: &discordgo.RateLimit{TooManyRequests: &discordgo.TooManyRequests{}}}, true},
		"502":            {rest(http.StatusBadGateway), true},
		"403":            {rest(http.StatusForbidden), false},
		"404":            {rest(http.StatusNotFound), false},
		"no response":    {&discordgo.RESTError{}, false},
		"something else": {errors.New("boom"), false},
	} {
		require.Equal(t, tc.want, bot.RetryLater(transient(tc.err)), name)
	}
}
