package discord

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/bwmarrin/discordgo"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

type countingAdmin struct{ runs atomic.Int32 }

func (c *countingAdmin) Run(context.Context, string, []string) (string, error) {
	c.runs.Add(1)
	return "ok", nil
}

// "Acknowledged means answered": a /threadbox command deferred just as the adapter starts closing
// still runs (Close waits for it); one that arrives once it is closed is not deferred at all.
func TestAdminCommandDeferredAtCloseStillRuns(t *testing.T) {
	cases := []struct {
		name       string
		closeFirst bool // closed before the command arrives
		wantRun    bool
	}{
		{"closing right after the deferral", false, true},
		{"closed before", true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			admin := &countingAdmin{}
			a, err := New(Options{BotToken: "t", Handler: nopHandler{}, Admin: admin, APIURL: "http://127.0.0.1:1/api", Logger: zap.NewNop()})
			require.NoError(t, err)
			closing := func() {
				a.mu.Lock()
				a.closed = true // Close's first step
				a.mu.Unlock()
			}
			if c.closeFirst {
				closing()
			}
			deferred := false
			in := &discordgo.Interaction{ID: "1", ChannelID: "C1", Token: "tok"}
			err = a.adminCommand(t.Context(), in, &discordgo.User{ID: "U1"}, "sessions", func(context.Context, *discordgo.InteractionResponse) error {
				deferred = true
				closing()
				return nil
			})
			a.wg.Wait()
			require.Equal(t, c.wantRun, admin.runs.Load() == 1, "admin command run")
			require.Equal(t, c.wantRun, deferred, "deferred")
			if !c.wantRun {
				require.Error(t, err)
			}
		})
	}
}
