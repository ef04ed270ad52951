package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime"
)

// The budget refusal's types live in agentpool/runtime, where the bot can read them; these names
// keep the gateway's own spelling.
type (
	BudgetScope = runtime.BudgetScope
	BudgetError = runtime.BudgetError
)

const (
	ScopeThread = runtime.ScopeThread
	ScopeUser   = runtime.ScopeUser
	ScopeDay    = runtime.ScopeDay
)

// ErrBudget matches every *BudgetError.
var ErrBudget = runtime.ErrBudget

// checkBudget returns a *BudgetError when the thread, the user (today) or the deployment (today) has
// used its budget. A call is let through while under the cap; the call that crosses it is counted,
// and the next one is refused.
func (g *Gateway) checkBudget(ctx context.Context, thread, user string) error {
	g.mu.Lock()
	b := g.cfg.Budget
	g.mu.Unlock()
	if b == (Budget{}) {
		return nil
	}
	now := g.cfg.Now().UTC()
	midnight := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	t, err := g.store.TurnUsageTotals(ctx, thread, user, midnight)
	if err != nil {
		return fmt.Errorf("reading usage: %w", err)
	}
	switch {
	case b.ThreadTokens > 0 && t.Thread >= b.ThreadTokens:
		return &BudgetError{Scope: ScopeThread, Limit: b.ThreadTokens, Used: t.Thread}
	case b.UserDailyTokens > 0 && user != "" && t.User >= b.UserDailyTokens:
		return &BudgetError{Scope: ScopeUser, Limit: b.UserDailyTokens, Used: t.User}
	case b.DailyTokens > 0 && t.All >= b.DailyTokens:
		return &BudgetError{Scope: ScopeDay, Limit: b.DailyTokens, Used: t.All}
	case b.UserDailyMicros > 0 && user != "" && t.UserCostMicros >= b.UserDailyMicros:
		return &BudgetError{Scope: ScopeUser, Limit: b.UserDailyMicros, Used: t.UserCostMicros, Money: true, Currency: g.cfg.Currency}
	case b.DailyMicros > 0 && t.AllCostMicros >= b.DailyMicros:
		return &BudgetError{Scope: ScopeDay, Limit: b.DailyMicros, Used: t.AllCostMicros, Money: true, Currency: g.cfg.Currency}
	}
	return nil
}

// SetBudget changes the budgets; the next call is checked against them.
func (g *Gateway) SetBudget(b Budget) {
	g.mu.Lock()
	g.cfg.Budget = b
	g.mu.Unlock()
}

// noteRefusal remembers that the thread's turn was refused, for Runtime to reply with.
func (g *Gateway) noteRefusal(thread string, e *BudgetError) {
	if thread == "" {
		return
	}
	g.mu.Lock()
	g.refused[thread] = e
	g.mu.Unlock()
}

// takeRefusal returns and forgets the thread's refusal.
func (g *Gateway) takeRefusal(thread string) *BudgetError {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.refused[thread]
	delete(g.refused, thread)
	return e
}
