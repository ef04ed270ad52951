package gateway

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// BudgetScope names the budget a call ran out of.
type BudgetScope string

const (
	ScopeThread BudgetScope = "thread"
	ScopeUser   BudgetScope = "user"
	ScopeDay    BudgetScope = "day"
)

// ErrBudget matches every *BudgetError.
var ErrBudget = errors.New("model budget exhausted")

// BudgetError is a call refused because a budget is used up. Its message is meant for the chat.
type BudgetError struct {
	Scope BudgetScope
	Limit int64
	Used  int64
	// Money: Limit and Used are costs in millionths of Currency, not tokens.
	Money    bool
	Currency string
}

func (e *BudgetError) Error() string {
	if e.Money {
		used, limit := formatMoney(e.Used), formatMoney(e.Limit)+" "+e.Currency
		if e.Scope == ScopeUser {
			return fmt.Sprintf("You have used your model budget for today (%s of %s). It renews at midnight UTC.", used, limit)
		}
		return fmt.Sprintf("The bot has used its model budget for today (%s of %s). It renews at midnight UTC.", used, limit)
	}
	switch e.Scope {
	case ScopeThread:
		return fmt.Sprintf("This thread has used its model budget (%d of %d tokens). Start a new thread to go on.", e.Used, e.Limit)
	case ScopeUser:
		return fmt.Sprintf("You have used your model budget for today (%d of %d tokens). It renews at midnight UTC.", e.Used, e.Limit)
	}
	return fmt.Sprintf("The bot has used its model budget for today (%d of %d tokens). It renews at midnight UTC.", e.Used, e.Limit)
}

// Is makes errors.Is(err, ErrBudget) hold.
func (e *BudgetError) Is(target error) bool { return target == ErrBudget }

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

// formatMoney renders millionths of a currency unit: cents from one cent up, every digit below.
func formatMoney(micros int64) string {
	if micros >= 10_000 || micros <= -10_000 {
		return strconv.FormatFloat(float64(micros)/1e6, 'f', 2, 64)
	}
	return strconv.FormatFloat(float64(micros)/1e6, 'f', -1, 64)
}
