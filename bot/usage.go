package bot

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/threadbox/threadbox/db"
)

// UsageStore reads the model use the gateway records on turns; db.TurnStore implements it.
type UsageStore interface {
	TurnUsageTotals(ctx context.Context, threadKey, userID string, since time.Time) (db.UsageTotals, error)
	TurnUsageTop(ctx context.Context, since time.Time, limit int) (db.UsageTop, error)
}

// Usage is how model use is shown: by status (the thread, the asker, everyone, against the budgets),
// by admin stats and so the ops view (today's totals, the top threads and users).
type Usage struct {
	Store  UsageStore
	Budget UsageBudget
	// Priced is set when a price table turns tokens into money: costs are shown, in Currency.
	Priced   bool
	Currency string
	// Now is the clock; days are UTC (default time.Now).
	Now func() time.Time
}

// UsageBudget mirrors the gateway's budgets; zero is no cap. Money is in millionths of Currency.
type UsageBudget struct {
	ThreadTokens, UserDailyTokens, DailyTokens int64
	UserDailyMicros, DailyMicros               int64
}

// UsageTopN is how many threads and users admin stats lists.
const UsageTopN = 5

func (u *Usage) midnight() time.Time {
	now := time.Now
	if u.Now != nil {
		now = u.Now
	}
	t := now().UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// statusLines is the thread's model use for status: what the thread, the asker and everyone used,
// and what is left of each budget that is set.
func (u *Usage) statusLines(ctx context.Context, thread, user string) (string, error) {
	t, err := u.Store.TurnUsageTotals(ctx, thread, user, u.midnight())
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Model use: this thread %s (%s today)", u.amount(t.Thread, t.ThreadCostMicros), number(t.ThreadToday))
	fmt.Fprintf(&b, ", you today %s, everyone today %s.", u.amount(t.User, t.UserCostMicros), u.amount(t.All, t.AllCostMicros))
	var left []string
	bud := u.Budget
	if bud.ThreadTokens > 0 {
		left = append(left, "this thread "+leftTokens(t.Thread, bud.ThreadTokens))
	}
	if bud.UserDailyTokens > 0 {
		left = append(left, "you today "+leftTokens(t.User, bud.UserDailyTokens))
	}
	if bud.UserDailyMicros > 0 {
		left = append(left, "you today "+u.leftMoney(t.UserCostMicros, bud.UserDailyMicros))
	}
	if bud.DailyTokens > 0 {
		left = append(left, "everyone today "+leftTokens(t.All, bud.DailyTokens))
	}
	if bud.DailyMicros > 0 {
		left = append(left, "everyone today "+u.leftMoney(t.AllCostMicros, bud.DailyMicros))
	}
	if len(left) > 0 {
		fmt.Fprintf(&b, "\nBudget left: %s.", strings.Join(left, "; "))
	}
	return b.String(), nil
}

// statsLines is today's model use for admin stats: totals, budgets and the top threads and users.
func (u *Usage) statsLines(ctx context.Context) (string, error) {
	since := u.midnight()
	t, err := u.Store.TurnUsageTotals(ctx, "", "", since)
	if err != nil {
		return "", fmt.Errorf("reading model usage: %w", err)
	}
	top, err := u.Store.TurnUsageTop(ctx, since, UsageTopN)
	if err != nil {
		return "", fmt.Errorf("reading model usage: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Model use today (since %s): %s.", since.Format("2006-01-02 00:00 UTC"), u.amount(t.All, t.AllCostMicros))
	var caps []string
	bud := u.Budget
	if bud.ThreadTokens > 0 {
		caps = append(caps, "per thread "+tokens(bud.ThreadTokens))
	}
	if bud.UserDailyTokens > 0 {
		caps = append(caps, "per user per day "+tokens(bud.UserDailyTokens))
	}
	if bud.UserDailyMicros > 0 {
		caps = append(caps, "per user per day "+u.money(bud.UserDailyMicros))
	}
	if bud.DailyTokens > 0 {
		caps = append(caps, "per day "+tokens(bud.DailyTokens)+" ("+leftTokens(t.All, bud.DailyTokens)+" left)")
	}
	if bud.DailyMicros > 0 {
		caps = append(caps, "per day "+u.money(bud.DailyMicros)+" ("+u.leftMoney(t.AllCostMicros, bud.DailyMicros)+" left)")
	}
	if len(caps) == 0 {
		caps = append(caps, "none")
	}
	fmt.Fprintf(&b, "\nBudgets: %s.", strings.Join(caps, "; "))
	for _, list := range []struct {
		title string
		rows  []db.UsageRank
	}{{"Top threads today", top.Threads}, {"Top users today", top.Users}} {
		if len(list.rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s:", list.title)
		for _, r := range list.rows {
			fmt.Fprintf(&b, "\n  %s %s", r.Name, u.amount(r.Tokens, r.CostMicros))
		}
	}
	return b.String(), nil
}

// amount is a token count, with its cost when there is a price table.
func (u *Usage) amount(toks, micros int64) string {
	if !u.Priced {
		return tokens(toks)
	}
	return tokens(toks) + ", " + u.money(micros)
}

func (u *Usage) money(micros int64) string {
	cur := u.Currency
	if cur == "" {
		cur = "USD"
	}
	return formatMoney(micros) + " " + cur
}

// leftTokens is what is left of a token budget, never below zero: "8,766 of 10,000 tokens".
func leftTokens(used, limit int64) string {
	return number(max(limit-used, 0)) + " of " + tokens(limit)
}

// leftMoney is what is left of a money budget, never below zero: "0.75 of 20.00 USD".
func (u *Usage) leftMoney(used, limit int64) string {
	return formatMoney(max(limit-used, 0)) + " of " + u.money(limit)
}

// tokens renders a token count: "12,345 tokens".
func tokens(n int64) string {
	if n == 1 {
		return "1 token"
	}
	return number(n) + " tokens"
}

// number renders n with thousands separators.
func number(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// formatMoney renders millionths of a currency unit: cents from one cent up, every digit below.
func formatMoney(micros int64) string {
	if micros >= 10_000 || micros <= -10_000 {
		return strconv.FormatFloat(float64(micros)/1e6, 'f', 2, 64)
	}
	return strconv.FormatFloat(float64(micros)/1e6, 'f', -1, 64)
}
