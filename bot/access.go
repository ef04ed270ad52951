package bot

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// AccessPolicy says who may use the bot on the chat platforms (config access.*). Every list that is
// empty lets everyone through on its dimension, as before allowlists existed; a non-empty list must
// match. The web chat is not governed here: who reaches it is decided by its own token and loopback
// trust (http.token, http.trust_loopback). Admins (admin.users) are always let in, so an operator
// cannot lock themselves out with a typo in a list.
type AccessPolicy struct {
	// SlackTeams are Slack workspace ids (T…) the bot answers in and whose people it answers: both
	// the workspace an event came to (Thread.Scope) and the sender's own (User.Team, which differs in
	// a Slack Connect channel) must be listed.
	SlackTeams []string
	// DiscordGuilds are Discord server ids the bot answers in.
	DiscordGuilds []string
	// Channels are platform:channel_id (slack:C0123, discord:4567). A Discord thread matches by the
	// channel it was started in (Message.ParentChannelID). Direct messages are governed by BlockDMs.
	Channels []string
	// Users are platform:user_id, as admin.users.
	Users []string
	// BlockDMs refuses direct messages (config access.dms: false).
	BlockDMs bool
	// OwnerOnlyControls limits reset and stop to the thread's starter and admins.
	OwnerOnlyControls bool
	// RefusalWindow is how often one refused person is told so (default 1h): more messages in the
	// window are dropped quietly, so a refused user cannot make the bot spam a channel.
	RefusalWindow time.Duration
}

// Refusal reasons, as counted and logged.
const (
	RefusedTeam    = "team"
	RefusedGuild   = "guild"
	RefusedChannel = "channel"
	RefusedUser    = "user"
	RefusedDM      = "dm"
	RefusedControl = "not_owner"
)

// maxRemembered bounds the refused people remembered for the refusal window; past it, entries whose
// window is over are dropped first, and if none is, the map starts over (at worst someone is told
// twice).
const maxRemembered = 10000

// access applies an AccessPolicy. It is safe for concurrent use.
type access struct {
	p                              AccessPolicy
	teams, guilds, channels, users map[string]bool
	isAdmin                        func(actor string) bool
	now                            func() time.Time
	log                            *zap.Logger

	// mu protects the following.
	mu     sync.Mutex
	told   map[string]time.Time // actor → when they were last told they are refused
	counts map[string]int64     // reason → refusals
}

func newAccess(p AccessPolicy, isAdmin func(string) bool, now func() time.Time, log *zap.Logger) *access {
	if p.RefusalWindow <= 0 {
		p.RefusalWindow = time.Hour
	}
	if log == nil {
		log = zap.NewNop()
	}
	set := func(l []string) map[string]bool {
		m := make(map[string]bool, len(l))
		for _, v := range l {
			m[v] = true
		}
		return m
	}
	return &access{
		p: p, teams: set(p.SlackTeams), guilds: set(p.DiscordGuilds), channels: set(p.Channels), users: set(p.Users),
		isAdmin: isAdmin, now: now, log: log, told: map[string]time.Time{}, counts: map[string]int64{},
	}
}

// admit returns "" when msg may be handled, else the reason it is refused.
func (a *access) admit(msg Message) string {
	k := msg.Thread
	if k.Platform == "web" || a.isAdmin(msg.User.Qualified(k.Platform)) {
		return ""
	}
	switch {
	case k.Platform == "slack" && len(a.teams) > 0 && (!a.teams[k.Scope] || !a.teams[senderTeam(msg)]):
		return RefusedTeam
	case k.Platform == "discord" && !k.IsDM() && len(a.guilds) > 0 && !a.guilds[k.Scope]:
		return RefusedGuild
	case k.IsDM() && a.p.BlockDMs:
		return RefusedDM
	case !k.IsDM() && len(a.channels) > 0 && !a.channelAllowed(msg):
		return RefusedChannel
	case len(a.users) > 0 && !a.users[msg.User.Qualified(k.Platform)]:
		return RefusedUser
	}
	return ""
}

// senderTeam is the workspace of msg's sender: a person from another organisation in a shared
// channel arrives in our workspace's thread, so Thread.Scope alone would let them through.
func senderTeam(msg Message) string {
	if msg.User.Team != "" {
		return msg.User.Team
	}
	return msg.Thread.Scope
}

func (a *access) channelAllowed(msg Message) bool {
	p := msg.Thread.Platform
	ids := []string{msg.ChannelID, msg.ParentChannelID}
	return slices.ContainsFunc(ids, func(id string) bool { return id != "" && a.channels[p+":"+id] })
}

// refused counts and logs one refusal, and reports whether the person should be told (once per
// RefusalWindow).
func (a *access) refused(msg Message, reason string) (tell bool) {
	actor := msg.User.Qualified(msg.Thread.Platform)
	now := a.now()
	a.mu.Lock()
	a.counts[reason]++
	n := a.counts[reason]
	last, seen := a.told[actor]
	tell = !seen || now.Sub(last) >= a.p.RefusalWindow
	if tell {
		a.rememberLocked(actor, now)
	}
	a.mu.Unlock()
	a.log.Info("message refused by the access policy", zap.String("reason", reason), zap.String("user", actor),
		zap.String("thread", msg.Thread.String()), zap.Int64("refusals_for_reason", n), zap.Bool("told", tell))
	return tell
}

func (a *access) rememberLocked(actor string, now time.Time) {
	if len(a.told) >= maxRemembered {
		for k, t := range a.told {
			if now.Sub(t) >= a.p.RefusalWindow {
				delete(a.told, k)
			}
		}
		if len(a.told) >= maxRemembered {
			clear(a.told)
		}
	}
	a.told[actor] = now
}

// Refusal implements Gate. The sender is told every time: the adapter answers only them (a slash
// command's ephemeral reply), so there is no channel to spam.
func (h *Handler) Refusal(msg Message) string {
	reason := h.access.admit(msg)
	if reason == "" {
		return ""
	}
	h.access.refused(msg, reason)
	return refusalText(reason)
}

// Admits implements Gate: the policy alone, nothing counted, logged or told.
func (h *Handler) Admits(msg Message) bool { return h.access.admit(msg) == "" }

// count records a refusal that is answered every time (a control command from a non-owner).
func (a *access) count(reason string) {
	a.mu.Lock()
	a.counts[reason]++
	a.mu.Unlock()
}

// Refusals reports how many messages the access policy refused, by reason (Refused*).
func (h *Handler) Refusals() map[string]int64 {
	h.access.mu.Lock()
	defer h.access.mu.Unlock()
	out := make(map[string]int64, len(h.access.counts))
	for k, v := range h.access.counts {
		out[k] = v
	}
	return out
}

// formatRefusals is the refusals line of admin stats.
func formatRefusals(counts map[string]int64) string {
	if len(counts) == 0 {
		return "Refused by the access policy: none since start."
	}
	reasons := make([]string, 0, len(counts))
	for r := range counts {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%s %d", r, counts[r])
	}
	return "Refused by the access policy since start: " + strings.Join(parts, ", ") + "."
}
