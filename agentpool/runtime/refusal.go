package runtime

import (
	"errors"
	"fmt"
)

// The model gateway (agentpool/gateway) refuses a turn's model calls once a budget is used up, and a
// turn on a cloud sandbox it has no public URL for; its runtime wrapper ends the turn with a
// *BudgetError or a *NoPublicURLError in Result.Refusal. The types live here, beside Result, so that
// the bot can word them for users without importing the gateway.

// BudgetScope names the budget a call ran out of.
type BudgetScope string

const (
	ScopeThread BudgetScope = "thread"
	ScopeUser   BudgetScope = "user"
	ScopeDay    BudgetScope = "day"
)

// ErrBudget matches every *BudgetError.
var ErrBudget = errors.New("model budget exhausted")

// BudgetError is a call refused because a budget is used up. Its fields are the facts; its message
// is for operators and the agent's model client (the bot words it for the chat).
type BudgetError struct {
	Scope BudgetScope
	Limit int64
	Used  int64
	// Money: Limit and Used are costs in millionths of Currency, not tokens.
	Money    bool
	Currency string
}

func (e *BudgetError) Error() string {
	unit := "tokens"
	if e.Money {
		unit = "millionths of " + e.Currency
	}
	per := ""
	if e.Scope != ScopeThread {
		per = " today"
	}
	return fmt.Sprintf("model budget exhausted: the %s budget is used up%s (%d of %d %s)", e.Scope, per, e.Used, e.Limit, unit)
}

// Is makes errors.Is(err, ErrBudget) hold.
func (e *BudgetError) Is(target error) bool { return target == ErrBudget }

// NoPublicURLError refuses a turn on a cloud sandbox (Provider) when the model gateway has no public
// URL for it to reach: gateway.public_url is unset, an operator's setting.
type NoPublicURLError struct{ Provider string }

func (e *NoPublicURLError) Error() string {
	return "the model gateway has no public URL for a sandbox on " + e.Provider + " to reach: gateway.public_url is empty"
}
