package bot

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// fakeTurns records what the handler asked of the pool.
type fakeTurns struct {
	mu                        sync.Mutex
	submitted, reset, stopped []string
}

var _ Turns = (*fakeTurns)(nil)

func (f *fakeTurns) Submit(_ context.Context, req agentpool.Request) (agentpool.Ticket, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.submitted = append(f.submitted, req.ThreadKey)
	return agentpool.Ticket{}, nil
}

func (f *fakeTurns) Cancel(k string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, k)
	return true
}

func (f *fakeTurns) Reset(_ context.Context, k string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reset = append(f.reset, k)
	return nil
}

func (f *fakeTurns) Depth(string) int { return 0 }
func (f *fakeTurns) Do(_ string, fn func(context.Context), _ func(error)) error {
	fn(context.Background())
	return nil
}

// ownerStore knows one session per thread key, by its owner.
type ownerStore struct {
	Store  // unused methods panic (nil)
	owners map[string]string
}

func (s ownerStore) SessionGet(_ context.Context, k string) (db.Session, error) {
	o, ok := s.owners[k]
	if !ok {
		return db.Session{}, db.ErrNotFound
	}
	return db.Session{ThreadKey: k, OwnerUserID: o}, nil
}

// posts is a Replier that keeps what was posted.
type posts struct {
	mu   sync.Mutex
	text []string
}

var _ Replier = (*posts)(nil)

func (p *posts) Post(_ context.Context, s string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.text = append(p.text, s)
	return nil
}
func (p *posts) Progress(context.Context, string) error                 { return nil }
func (p *posts) Upload(context.Context, string, []byte) (string, error) { return "", nil }
func (p *posts) React(context.Context, string) error                    { return nil }
func (p *posts) Limits() Limits                                         { return Limits{MaxMessage: 4000, MaxChunks: 4} }

func (p *posts) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.text...)
}

func slackMsg(team, channel, user, text string) Message {
	return Message{Thread: SlackThread(team, channel, "1.0"), ChannelID: channel, User: User{ID: user}, Text: text, EventID: text + user}
}

func fromTeam(m Message, team string) Message { m.User.Team = team; return m }

func TestAccessPolicyAdmits(t *testing.T) {
	full := AccessPolicy{
		SlackTeams: []string{"T1"}, DiscordGuilds: []string{"G1"},
		Channels: []string{"slack:C1", "discord:P1"}, Users: []string{"slack:U1", "discord:D1"},
	}
	dm := func(p AccessPolicy) AccessPolicy { p.BlockDMs = true; return p }
	for _, tc := range []struct {
		name   string
		policy AccessPolicy
		msg    Message
		want   string
	}{
		{"empty policy lets everyone in", AccessPolicy{}, slackMsg("T9", "C9", "U9", "hi"), ""},
		{"listed user in listed channel", full, slackMsg("T1", "C1", "U1", "hi"), ""},
		{"other workspace", full, slackMsg("T2", "C1", "U1", "hi"), RefusedTeam},
		{"other channel", full, slackMsg("T1", "C2", "U1", "hi"), RefusedChannel},
		{"sender of another workspace in ours (Slack Connect)", full, fromTeam(slackMsg("T1", "C1", "U1", "hi"), "T2"), RefusedTeam},
		{"sender of ours", full, fromTeam(slackMsg("T1", "C1", "U1", "hi"), "T1"), ""},
		{"sender of ours in an unlisted workspace", full, fromTeam(slackMsg("T2", "C1", "U1", "hi"), "T1"), RefusedTeam},
		{"unlisted user", full, slackMsg("T1", "C1", "U2", "hi"), RefusedUser},
		{"admin bypasses every list", full, slackMsg("T2", "C2", "UADMIN", "hi"), ""},
		{"DMs allowed skip the channel list", full,
			Message{Thread: SlackDM("T1", "U1"), ChannelID: "D1", User: User{ID: "U1"}}, ""},
		{"DMs blocked", dm(AccessPolicy{}),
			Message{Thread: SlackDM("T1", "U1"), ChannelID: "D1", User: User{ID: "U1"}}, RefusedDM},
		{"Discord thread matches by its parent channel", full,
			Message{Thread: DiscordThread("G1", "TH1"), ChannelID: "TH1", ParentChannelID: "P1", User: User{ID: "D1"}}, ""},
		{"other guild", full,
			Message{Thread: DiscordThread("G2", "TH1"), ChannelID: "TH1", ParentChannelID: "P1", User: User{ID: "D1"}}, RefusedGuild},
		{"a Slack id does not admit the same id on Discord", AccessPolicy{Users: []string{"slack:D1"}},
			Message{Thread: DiscordDM("D1"), ChannelID: "X", User: User{ID: "D1"}}, RefusedUser},
		{"the web chat has its own gate", dm(full), Message{Thread: WebThread("c1"), User: User{ID: "local"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			admin := NewAdmin(nil, nil, []string{"slack:UADMIN"}, nil)
			a := newAccess(tc.policy, admin.IsAdmin, time.Now, nil)
			require.Equal(t, tc.want, a.admit(tc.msg))
		})
	}
}

// TestRefusedUserIsToldOncePerWindowAndNothingIsRecorded: a refused person gets one reply per window,
// every refusal is counted, and no turn is submitted (so no session and no sandbox).
func TestRefusedUserIsToldOncePerWindowAndNothingIsRecorded(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	turns := &fakeTurns{}
	h := NewHandler(HandlerConfig{
		Access: AccessPolicy{Users: []string{"slack:U1"}, RefusalWindow: time.Hour},
		Now:    func() time.Time { return now },
	}, turns, ownerStore{}, nil, nil)
	r := &posts{}
	for _, text := range []string{"hello", "help", "reset", "hello again"} {
		require.NoError(t, h.Handle(t.Context(), slackMsg("T1", "C1", "U2", text), r))
	}
	require.NoError(t, h.Wait(t.Context()))
	require.Equal(t, []string{refusalText(RefusedUser)}, r.all(), "one polite reply, whatever was sent")
	require.Empty(t, turns.submitted, "nothing recorded")
	require.Empty(t, turns.reset)
	require.Equal(t, map[string]int64{RefusedUser: 4}, h.Refusals(), "every refusal is counted")

	now = now.Add(time.Hour)
	require.NoError(t, h.Handle(t.Context(), slackMsg("T1", "C1", "U2", "next window"), r))
	require.NoError(t, h.Wait(t.Context()))
	require.Len(t, r.all(), 2, "told again in the next window")

	require.NoError(t, h.Handle(t.Context(), slackMsg("T1", "C1", "U1", "listed"), r))
	require.Equal(t, []string{"slack:T1:C1:1.0"}, turns.submitted, "a listed user's message becomes a turn")
}

func TestControlsAreOwnerOnly(t *testing.T) {
	key := SlackThread("T1", "C1", "1.0").String()
	for _, tc := range []struct {
		name       string
		ownerOnly  bool
		owners     map[string]string
		user, cmd  string
		wantActed  bool
		wantPosted string
	}{
		{"owner resets", true, map[string]string{key: "U1"}, "U1", CmdReset, true, "Reset:"},
		{"member cannot reset", true, map[string]string{key: "U1"}, "U2", CmdReset, false, notOwnerText(CmdReset)},
		{"member cannot stop", true, map[string]string{key: "U1"}, "U2", CmdStop, false, notOwnerText(CmdStop)},
		{"admin resets another's thread", true, map[string]string{key: "U1"}, "UADMIN", CmdReset, true, "Reset:"},
		{"no session yet: nothing to protect", true, nil, "U2", CmdReset, true, "Reset:"},
		{"off: any member resets", false, map[string]string{key: "U1"}, "U2", CmdReset, true, "Reset:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			turns := &fakeTurns{}
			admin := NewAdmin(nil, nil, []string{"slack:UADMIN"}, nil)
			h := NewHandler(HandlerConfig{Access: AccessPolicy{OwnerOnlyControls: tc.ownerOnly}},
				turns, ownerStore{owners: tc.owners}, admin, nil)
			r := &posts{}
			require.NoError(t, h.Handle(t.Context(), slackMsg("T1", "C1", tc.user, tc.cmd), r))
			require.NoError(t, h.Wait(t.Context()))
			acted := turns.reset
			if tc.cmd == CmdStop {
				acted = turns.stopped
			}
			require.Equal(t, tc.wantActed, len(acted) == 1)
			require.Len(t, r.all(), 1)
			require.Contains(t, r.all()[0], tc.wantPosted)
			if !tc.wantActed {
				require.Equal(t, map[string]int64{RefusedControl: 1}, h.Refusals())
			}
		})
	}
}

// TestAdminStatsCountsRefusals: the operator sees the refusals in admin stats.
func TestAdminStatsCountsRefusals(t *testing.T) {
	st := &auditStore{Store: dbtest.OpenSQLite(t)}
	admin := NewAdmin(st, &recordingOps{store: st}, []string{"slack:UADMIN"}, nil)
	h := NewHandler(HandlerConfig{Access: AccessPolicy{BlockDMs: true}}, &fakeTurns{}, ownerStore{}, admin, nil)
	out, err := admin.Run(t.Context(), "slack:UADMIN", []string{"stats"})
	require.NoError(t, err)
	require.Contains(t, out, "Refused by the access policy: none since start.")

	for range 2 {
		require.NoError(t, h.Handle(t.Context(), Message{Thread: SlackDM("T1", "U9"), User: User{ID: "U9"}, Text: "hi"}, &posts{}))
	}
	require.NoError(t, h.Wait(t.Context()))
	out, err = admin.Run(t.Context(), "slack:UADMIN", []string{"stats"})
	require.NoError(t, err)
	require.Contains(t, out, "Refused by the access policy since start: dm 2.")
}

// TestAdminWordInAnOrdinaryMessage: "admin" opens an admin command only when a command follows it
// (or, for an admin, anything: they are told it is unknown). A user's request that merely starts
// with the word ("Admin panel is broken…") goes to the agent: it used to be taken as an admin
// attempt, refused with "This attempt was logged", audited as denied, and lost.
func TestAdminWordInAnOrdinaryMessage(t *testing.T) {
	for _, tc := range []struct {
		name, user, text string
		wantTurn         bool
		wantPosted       string // "" when a turn
		wantAudit        string // the audit entry's action, "" for none
	}{
		{"a sentence starting with Admin", "U1", "Admin panel is broken, please fix the login page", true, "", ""},
		{"a sentence, lower case", "U1", "admin users cannot log in since yesterday", true, "", ""},
		{"admin then a newline and prose", "U1", "Admin\nthe dashboard 500s", true, "", ""},
		{"a stranger's real command is refused and audited", "U1", "admin destroy slack:T1:C1:1.0", false, "This attempt was logged", "admin destroy"},
		{"a stranger's bare admin is refused and audited", "U1", "admin", false, "This attempt was logged", "admin help"},
		{"a stranger's command in capitals", "U1", "ADMIN Stats", false, "This attempt was logged", "admin stats"},
		{"an admin's command after a tab", "UADMIN", "admin\tstats", false, "Refused by the access policy", "admin stats"},
		{"an admin's typo is an unknown command", "UADMIN", "admin sesions", false, "unknown admin command", "admin sesions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &auditStore{Store: dbtest.OpenSQLite(t)}
			admin := NewAdmin(st, &recordingOps{store: st}, []string{"slack:UADMIN"}, nil)
			turns := &fakeTurns{}
			h := NewHandler(HandlerConfig{}, turns, ownerStore{}, admin, nil)
			r := &posts{}
			require.NoError(t, h.Handle(t.Context(), slackMsg("T1", "C1", tc.user, tc.text), r))
			require.NoError(t, h.Wait(t.Context()))
			require.Equal(t, tc.wantTurn, len(turns.submitted) == 1, "submitted: %v", turns.submitted)
			if tc.wantPosted != "" {
				require.Len(t, r.all(), 1)
				require.Contains(t, r.all()[0], tc.wantPosted)
			}
			entries, err := st.AuditList(t.Context(), db.AuditQuery{})
			require.NoError(t, err)
			if tc.wantAudit == "" {
				require.Empty(t, entries)
				return
			}
			require.NotEmpty(t, entries)
			require.Equal(t, tc.wantAudit, entries[0].Action)
		})
	}
}

// TestAdminCommandsListsAdminHelp: every command AdminHelp lists is recognised as one.
func TestAdminCommandsListsAdminHelp(t *testing.T) {
	lines := strings.Split(AdminHelp, "\n")[1:]
	require.NotEmpty(t, lines)
	for _, l := range lines {
		require.True(t, adminCommands[strings.Fields(l)[0]], "AdminHelp lists %q", l)
	}
}
