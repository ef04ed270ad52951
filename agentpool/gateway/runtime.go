package gateway

import (
	"context"
	"errors"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// Runtime wraps rt so that a turn over budget ends refused (Result.Refusal, a *BudgetError, which the
// bot words): at once when a budget is used up before the turn, or in place of whatever the runtime
// made of a refused call during it. The
// turn's usage is the gateway's own record (written to the turn as calls end), so the runtime's
// figure is dropped rather than written over it. On a cloud sandbox (Cloud), the runtime's gateway
// settings (the forwarder's address, PlaceholderKey) become the public URL and the sandbox's token.
func (g *Gateway) Runtime(rt runtime.Runtime) runtime.Runtime {
	return &gatedRuntime{Runtime: rt, g: g}
}

type gatedRuntime struct {
	runtime.Runtime
	g *Gateway
}

// Ensure implements runtime.Runtime; on a cloud sandbox, the runtime's server (if it has one) starts
// with the public URL and the sandbox's token.
func (r *gatedRuntime) Ensure(ctx context.Context, sb sandbox.Sandbox) error {
	sb, _, refusal, err := r.g.forCloud(ctx, sb)
	if err == nil && refusal != nil {
		err = refusal
	}
	if err != nil {
		return err
	}
	return r.Runtime.Ensure(ctx, sb)
}

// Session implements runtime.Runtime, with the sandbox Ensure saw.
func (r *gatedRuntime) Session(ctx context.Context, sb sandbox.Sandbox, prevID, title string) (string, bool, error) {
	sb, _, refusal, err := r.g.forCloud(ctx, sb)
	if err == nil && refusal != nil {
		err = refusal
	}
	if err != nil {
		return "", false, err
	}
	return r.Runtime.Session(ctx, sb, prevID, title)
}

// Prompt implements runtime.Runtime.
func (r *gatedRuntime) Prompt(ctx context.Context, sb sandbox.Sandbox, sessionID string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
	var id ident
	known := false
	if _, ok := r.g.cloud(sb.Handle()); ok {
		var refusal *runtime.NoPublicURLError
		var err error
		if sb, id, refusal, err = r.g.forCloud(ctx, sb); err != nil {
			return runtime.Result{}, err
		} else if refusal != nil {
			return runtime.Result{Answer: refusal.Error(), IsError: true, Refusal: refusal}, nil
		}
		p.Env = sb.(*publicSandbox).rw.env(p.Env)
		known = true
	} else {
		id, known = r.g.identify(ctx, sb.Handle())
	}
	if known {
		r.g.takeRefusal(id.Thread) // a refusal from an earlier turn is not this one's
		if turn, err := r.g.store.TurnGetRunning(ctx, id.Thread); err == nil {
			var be *BudgetError
			if err := r.g.checkBudget(ctx, id.Thread, turn.UserID); errors.As(err, &be) {
				return runtime.Result{Answer: be.Error(), IsError: true, Refusal: be}, nil
			}
		} else if !errors.Is(err, db.ErrNotFound) {
			return runtime.Result{}, err
		}
	}
	res, err := r.Runtime.Prompt(ctx, sb, sessionID, p, emit)
	if known {
		if be := r.g.takeRefusal(id.Thread); be != nil && ctx.Err() == nil {
			return runtime.Result{Answer: be.Error(), IsError: true, Refusal: be, Duration: res.Duration}, nil
		}
	}
	res.Usage = runtime.Usage{}
	return res, err
}
