package bot

import (
	"fmt"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/agentpool/runtime"
)

// Texts the access policy, the sandbox limits, the model budgets and the pool's status notes show
// users. Below bot the pool and the gateway report facts (a *LimitError, a *runtime.BudgetError or
// *runtime.NoPublicURLError, an event's Note with its numbers); they are worded here, and only here.

// refusalText is the one polite reply a refused person gets per refusal window.
func refusalText(reason string) string {
	switch reason {
	case RefusedDM:
		return "Sorry, I don't take direct messages here. Mention me in a channel I serve instead."
	case RefusedChannel:
		return "Sorry, I'm not enabled in this channel. Ask the bot's operator to add it, or mention me in a channel where I work."
	case RefusedTeam, RefusedGuild:
		return "Sorry, I'm not enabled for this workspace. Ask the bot's operator to add it."
	}
	return "Sorry, I only work for the people the bot's operator has listed. Ask them to add you."
}

// notOwnerText answers a control command (reset, stop) from someone other than the thread's starter.
func notOwnerText(cmd string) string {
	return fmt.Sprintf("Only the person who started this thread, or an admin, can %s it.", cmd)
}

// limitText explains a turn that hit a sandbox limit, and what to do about it (Explain shows it for
// agentpool.ELIMIT, with the numbers).
func limitText(e *agentpool.LimitError) string {
	if e.Kind == agentpool.LimitMemory {
		return fmt.Sprintf("This turn hit the %d MiB memory limit: the sandbox killed the process using the most memory. "+
			"Use less memory at once (smaller inputs, fewer parallel jobs), or ask the operator to raise sandbox.resources.memory_mb.", e.LimitMB)
	}
	used := HumanSize(e.UsedKB << 10)
	if e.Stopped {
		return fmt.Sprintf("This thread's sandbox went over its %d MiB disk limit (its files use %s), so I stopped the turn. "+
			"Delete files you no longer need, or send \"reset\" to start a fresh sandbox.", e.LimitMB, used)
	}
	return fmt.Sprintf("This thread's sandbox is over its %d MiB disk limit (its files use %s). "+
		"Delete files you no longer need, or send \"reset\" to start a fresh sandbox.", e.LimitMB, used)
}

// budgetText explains a turn the model gateway refused because a budget is used up, with the
// numbers, and when it renews (Explain shows it for agentpool.EBUDGET).
func budgetText(e *runtime.BudgetError) string {
	if e.Money {
		used, limit := formatMoney(e.Used), formatMoney(e.Limit)+" "+e.Currency
		if e.Scope == runtime.ScopeUser {
			return fmt.Sprintf("You have used your model budget for today (%s of %s). It renews at midnight UTC.", used, limit)
		}
		return fmt.Sprintf("The bot has used its model budget for today (%s of %s). It renews at midnight UTC.", used, limit)
	}
	switch e.Scope {
	case runtime.ScopeThread:
		return fmt.Sprintf("This thread has used its model budget (%d of %d tokens). Start a new thread to go on.", e.Used, e.Limit)
	case runtime.ScopeUser:
		return fmt.Sprintf("You have used your model budget for today (%d of %d tokens). It renews at midnight UTC.", e.Used, e.Limit)
	}
	return fmt.Sprintf("The bot has used its model budget for today (%d of %d tokens). It renews at midnight UTC.", e.Used, e.Limit)
}

// noPublicURLText explains a turn on a cloud sandbox that the model gateway cannot serve (Explain
// shows it for a *runtime.NoPublicURLError).
func noPublicURLText(e *runtime.NoPublicURLError) string {
	return fmt.Sprintf("This thread's sandbox runs in the cloud (%s), and the bot's model gateway has no public URL for it "+
		"to reach: ask the operator to set gateway.public_url.", e.Provider)
}

// statusText is the progress headline for a status event: the pool reports facts (ev.Note, with its
// numbers) and they are worded here; a runtime's own status (no Note) is shown as it is.
func statusText(ev runtime.Event) string {
	switch ev.Note {
	case agentpool.NoteInLine:
		return fmt.Sprintf("at capacity: all %d sandboxes are busy; you are number %d in line", ev.Max, ev.Place)
	case agentpool.NoteWaitingForProvider:
		return "waiting for the sandbox service"
	case agentpool.NoteReadingThread:
		return "reading the thread…"
	case "":
		return ev.Text
	}
	return "working…" // a note this bot does not know yet: better a plain headline than a code
}
