package bot

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool"
)

// CmdPush delivers the thread's work: its branch to the forge, and a pull request.
const CmdPush = "push"

// Pusher is an optional capability of the handler's Turns (*agentpool.Pool has it).
type Pusher interface {
	Push(ctx context.Context, threadKey string) (string, error)
}

// push runs the push command off the adapter's call; the pool queues it behind the thread's turns.
func (h *Handler) push(ctx context.Context, msg Message, r Replier) error {
	key := msg.Thread.String()
	p, ok := h.turns.(Pusher)
	h.reply(ctx, msg, r, CmdPush, func(ctx context.Context) string {
		if !ok {
			return "Pushing is not set up on this bot."
		}
		note, err := p.Push(ctx, key)
		switch {
		case errors.Is(err, agentpool.ErrNoWorkspace):
			return "There is nothing to push here: this thread has no repository checked out (repos.default or repos.channels)."
		case err != nil:
			return "Push failed: " + Explain(h.log, "push failed", err, zap.String("thread", key)).String()
		}
		return note
	})
	return nil
}

// WorkspaceDescriber is an optional capability of the handler's Turns (*agentpool.Pool has it): the
// thread's repository line for status.
type WorkspaceDescriber interface {
	DescribeWorkspace(ctx context.Context, t agentpool.WorkspaceThread) string
}

// withWorkspace adds the thread's repository, branch and last pushed commit to a status text.
func (h *Handler) withWorkspace(ctx context.Context, msg Message, status string) string {
	status = h.withRuntime(ctx, msg, h.withProvider(ctx, msg, status))
	d, ok := h.turns.(WorkspaceDescriber)
	if !ok {
		return status
	}
	line := d.DescribeWorkspace(ctx, agentpool.WorkspaceThread{ThreadKey: msg.Thread.String(), Platform: msg.Thread.Platform, ChannelID: msg.ChannelID, UserID: msg.User.ID})
	if line == "" {
		return status
	}
	return status + "\n" + line
}
