package slack

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/bot/slack/slackfake"
)

// TestEarlierIsAReferenceUntilTheTurnReads: a mention mid-thread reaches the handler with a
// reference to the thread before it and no conversations.replies call on the ack path; reading it
// pages through the thread, keeps its first message and the newest within the caps, leaves out the
// bot's own posts and everything from the mention on, and names people and integrations.
func TestEarlierIsAReferenceUntilTheTurnReads(t *testing.T) {
	h := newStubHandler()
	hs := newHarness(t, nil, h, func(o *Options) { o.ContextMessages = 4 })
	f := hs.fake
	f.AddUser("U1", "ada")
	f.AddUser("U2", "bob")
	root := f.ChannelMessage("C1", "U1", "the build is red since this morning")
	f.BotPost("C1", "B0CI", "ci-bot", "job 42 failed: TestParse", slackfake.InThread(root.TS))
	// More than one page of conversations.replies (200), so reading takes a cursor.
	for i := range 250 {
		f.ChannelMessage("C1", "U2", fmt.Sprintf("chatter %d", i), slackfake.InThread(root.TS))
	}
	f.ChannelMessage("C1", "U2", "last words", slackfake.InThread(root.TS))
	ev := f.Mention("C1", "U1", "fix it", slackfake.InThread(root.TS))
	f.ChannelMessage("C1", "U2", "said after the mention", slackfake.InThread(root.TS))

	hs.deliver(t, ev)
	msg := h.next(t)
	require.NotNil(t, msg.Earlier)
	require.Equal(t, "C1/"+root.TS+"/"+ev.TS, msg.Earlier.Ref)
	hs.drain(t)
	require.Empty(t, f.Calls("conversations.replies"), "nothing is read on the ack path")

	em, err := msg.Earlier.Read(t.Context())
	require.NoError(t, err)
	var got []string
	for _, m := range em.Messages {
		got = append(got, m.Author+": "+m.Text)
	}
	require.Equal(t, []string{
		"ada: the build is red since this morning",
		"bob: chatter 248", "bob: chatter 249", "bob: last words",
	}, got, "the first message, then the newest before the mention")
	require.Equal(t, 1+1+250+1-4, em.Omitted)
	calls := f.Calls("conversations.replies")
	require.Len(t, calls, 2, "two pages")
	require.Equal(t, ev.TS, calls[0].Params["latest"], "only what came before the mention")
	require.NotEmpty(t, calls[1].Params["cursor"])

	// The same read through the durable reference (a takeover by another process).
	again, err := hs.ad.ReadEarlier(t.Context(), msg.Earlier.Ref)
	require.NoError(t, err)
	require.Equal(t, em, again)

	// Errors come back to the caller (the pool goes on without the context and says so).
	f.Fail("conversations.replies", 1, "missing_scope")
	_, err = msg.Earlier.Read(t.Context())
	require.ErrorContains(t, err, "missing_scope")
	_, err = hs.ad.ReadEarlier(t.Context(), "not-a-ref")
	require.Error(t, err)
}

// TestEarlierOnlyForMentionsMidThread: a top-level mention, a DM, and a mention with reading turned
// off carry no reference.
func TestEarlierOnlyForMentionsMidThread(t *testing.T) {
	tests := []struct {
		name string
		off  bool
		ev   func(f *slackfake.Server) slackfake.Event
		want bool
	}{
		{"top-level mention", false, func(f *slackfake.Server) slackfake.Event { return f.Mention("C1", "U1", "hi") }, false},
		{"DM", false, func(f *slackfake.Server) slackfake.Event { return f.DM("U1", "hi") }, false},
		{"mention mid-thread", false, func(f *slackfake.Server) slackfake.Event {
			root := f.ChannelMessage("C1", "U1", "root")
			return f.Mention("C1", "U1", "hi", slackfake.InThread(root.TS))
		}, true},
		{"mention mid-thread, reading off", true, func(f *slackfake.Server) slackfake.Event {
			root := f.ChannelMessage("C1", "U1", "root")
			return f.Mention("C1", "U1", "hi", slackfake.InThread(root.TS))
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newStubHandler()
			hs := newHarness(t, nil, h, func(o *Options) {
				if tc.off {
					o.ContextMessages = -1
				}
			})
			hs.deliver(t, tc.ev(hs.fake))
			require.Equal(t, tc.want, h.next(t).Earlier != nil)
		})
	}
}

// TestE2EMentionMidThreadReadsTheThread: through the real pool, a Docker sandbox and the shell
// runtime (which leaves what it was given as history in .threadbox/history.md), a mention in the
// middle of a thread gets the earlier messages from slackfake in its prompt, capped as configured,
// and the reply says how many it read; the next mention reads nothing again.
func TestE2EMentionMidThreadReadsTheThread(t *testing.T) {
	t.Parallel()
	s := newStack(t, func(o *Options) { o.ContextMessages, o.ContextChars = 3, 2000 })
	s.fake.AddUser("U1", "ada")
	s.fake.AddUser("U2", "bob")
	root := s.fake.ChannelMessage("C1", "U1", "the build is red since this morning")
	s.fake.BotPost("C1", "B0CI", "ci-bot", "job 42 failed: TestParse", slackfake.InThread(root.TS))
	for i := range 4 {
		s.fake.ChannelMessage("C1", "U2", fmt.Sprintf("chatter %d", i), slackfake.InThread(root.TS))
	}
	ev := s.fake.Mention("C1", "U1", "cat .threadbox/history.md", slackfake.InThread(root.TS))
	s.deliver(t, ev)
	require.Equal(t, bot.ReactDone, s.waitDone(t, "C1", ev.TS))

	prompt := answers(s.fake, "C1", root.TS, regexp.MustCompile(`Earlier messages of the chat thread`))
	require.Len(t, prompt, 1, "the runtime got the thread's earlier messages")
	for _, want := range []string{"ada, ", "the build is red since this morning", "bob, ", "chatter 2", "chatter 3", "3 more were left out"} {
		require.Contains(t, prompt[0], want)
	}
	for _, not := range []string{"chatter 1", "job 42 failed", "cat .threadbox/history.md"} {
		require.NotContains(t, prompt[0], not, "capped at 3 messages: the first and the two newest")
	}
	note := answers(s.fake, "C1", root.TS, regexp.MustCompile(`^\(I read the`))
	require.Equal(t, []string{"(I read the 3 earlier messages of this thread before your message; 3 older or longer ones did not fit.)"}, note)
	require.Len(t, s.fake.Calls("conversations.replies"), 1)

	next := s.fake.Mention("C1", "U2", "echo second", slackfake.InThread(root.TS))
	s.deliver(t, next)
	require.Equal(t, bot.ReactDone, s.waitDone(t, "C1", next.TS))
	require.Len(t, s.fake.Calls("conversations.replies"), 1, "only the thread's first turn reads it")
	require.Len(t, answers(s.fake, "C1", root.TS, regexp.MustCompile(`^\(I read the`)), 1)
	require.False(t, strings.Contains(strings.Join(answers(s.fake, "C1", root.TS, regexp.MustCompile(`second`)), "\n"), "Earlier messages"))
}
