package discord

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/bwmarrin/discordgo"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/bot/discord/discordfake"
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

// A /ask in a channel deferred as the adapter closes still links its new thread from @original and
// posts the question there: the deferral promised an answer.
func TestChannelAskDeferredAtCloseStillLinksItsThread(t *testing.T) {
	fake := discordfake.New(discordfake.Options{})
	t.Cleanup(fake.Close)
	fake.GuildChannel("G1", "C1")
	a, err := New(Options{BotToken: fake.Options().BotToken, ApplicationID: fake.Options().AppID,
		Handler: nopHandler{}, APIURL: fake.APIURL(), Logger: zap.NewNop()})
	require.NoError(t, err)
	fin := fake.Slash("C1", discordfake.Person("U1"), "ask", map[string]string{"prompt": "q"})
	fake.DispatchInteraction(fin) // no gateway is open: only its clock starts
	in := &discordgo.Interaction{ID: fin.ID, AppID: fake.Options().AppID, GuildID: "G1", ChannelID: "C1", Token: fin.Token}
	err = a.takeCommand(t.Context(), in, &discordgo.User{ID: "U1"}, "ask", "q", func(ctx context.Context, resp *discordgo.InteractionResponse) error {
		a.mu.Lock()
		a.closed = true // Close's first step, right after the deferral
		a.mu.Unlock()
		return a.s.InteractionRespond(in, resp, discordgo.WithContext(ctx))
	})
	require.NoError(t, err)
	a.wg.Wait()
	threads := fake.Threads("C1")
	require.Len(t, threads, 1)
	var said []string
	for _, m := range fake.BotMessages(threads[0].ID) {
		said = append(said, m.Content)
	}
	require.Equal(t, []string{"<@U1> asked: q"}, said)
	rec, _ := fake.Interaction(fin.ID)
	orig, _ := fake.Message("C1", rec.OriginalID)
	require.Contains(t, orig.Content, "<#"+threads[0].ID+">")
}
