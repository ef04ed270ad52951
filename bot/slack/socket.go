package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/bot"
)

// RunSocketMode receives events and slash commands over Socket Mode (slack.app_token) until ctx ends
// or Slack refuses the token. slack-go reconnects by itself (a fresh apps.connections.open each
// time, with backoff). Every envelope is acknowledged first and worked on after, exactly like the
// HTTP path; the same dedupe covers Slack's redeliveries of unacknowledged envelopes.
func (a *Adapter) RunSocketMode(ctx context.Context) error {
	if a.opts.AppToken == "" {
		return errors.New("slack: Socket Mode needs an app-level token (slack.app_token, xapp-…)")
	}
	sm := socketmode.New(a.api)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- sm.RunContext(ctx) }()
	for {
		select {
		case <-ctx.Done():
			// Wait for the client to wind down so no goroutine of ours outlives the call.
			<-errc
			return nil
		case err := <-errc:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("slack: socket mode: %w", err)
		case evt := <-sm.Events:
			a.onSocketEvent(ctx, sm, evt)
		}
	}
}

func (a *Adapter) onSocketEvent(ctx context.Context, sm *socketmode.Client, evt socketmode.Event) {
	switch evt.Type {
	case socketmode.EventTypeEventsAPI:
		if evt.Request == nil {
			return
		}
		if a.queue.isClosed() {
			// Left unacknowledged, Slack redelivers it to another connection (another replica).
			a.log.Info("event left unacknowledged: shutting down", zap.String("envelope", evt.Request.EnvelopeID))
			return
		}
		// Taken (recorded) first, acknowledged after: acknowledged means answered.
		if a.acceptPayload(ctx, evt.Request.Payload, evt.Request.RetryAttempt) {
			a.ack(ctx, sm, evt.Request.EnvelopeID, nil)
		}
	case socketmode.EventTypeErrorBadMessage:
		// slack-go could not parse the envelope (slackevents is strict about blocks). Ack it so Slack
		// stops redelivering it, and read it with our own tolerant parser.
		bad, _ := evt.Data.(*socketmode.ErrorBadMessage)
		if bad == nil {
			return
		}
		var req socketmode.Request
		if err := json.Unmarshal(bad.Message, &req); err != nil || req.EnvelopeID == "" {
			a.log.Warn("unreadable Socket Mode frame", zap.NamedError("cause", bad.Cause))
			return
		}
		if req.Type == socketmode.RequestTypeEventsAPI {
			if a.acceptPayload(ctx, req.Payload, req.RetryAttempt) {
				a.ack(ctx, sm, req.EnvelopeID, nil)
			}
		} else {
			a.ack(ctx, sm, req.EnvelopeID, nil)
			a.log.Warn("unreadable Socket Mode envelope acknowledged and dropped", zap.String("type", req.Type), zap.NamedError("cause", bad.Cause))
		}
	case socketmode.EventTypeSlashCommand:
		cmd, ok := evt.Data.(slack.SlashCommand)
		if !ok || evt.Request == nil {
			return
		}
		id := evt.Request.EnvelopeID
		// The command may take up to CommandBudget before the ack goes out; it must not hold up the
		// event loop (and so every other envelope's ack) meanwhile.
		if !a.queue.add(func() {
			a.ack(ctx, sm, id, ephemeral{ResponseType: "ephemeral", Text: a.runCommand(ctx, cmd)})
		}) {
			a.log.Info("slash command left unacknowledged: shutting down", zap.String("envelope", id))
		}
	case socketmode.EventTypeInteractive:
		if evt.Request != nil {
			a.ack(ctx, sm, evt.Request.EnvelopeID, nil)
		}
	case socketmode.EventTypeConnected:
		a.log.Info("Socket Mode connected")
	case socketmode.EventTypeConnectionError:
		a.log.Warn("Socket Mode connection failed; slack-go retries with backoff", zap.Any("detail", evt.Data))
	case socketmode.EventTypeInvalidAuth:
		a.log.Error("Socket Mode: Slack refused slack.app_token")
	case socketmode.EventTypeIncomingError, socketmode.EventTypeErrorWriteFailed:
		a.log.Warn("Socket Mode I/O error", zap.String("type", string(evt.Type)), zap.Any("detail", evt.Data))
	}
}

// ack acknowledges an envelope; a payload is the slash command's immediate reply.
func (a *Adapter) ack(ctx context.Context, sm *socketmode.Client, envelopeID string, payload any) {
	if err := sm.AckCtx(ctx, envelopeID, payload); err != nil {
		a.log.Warn("Socket Mode ack failed", zap.String("envelope", envelopeID), zap.Error(err))
	}
}

// acceptPayload runs an events_api payload through the same path as an HTTP event.
// acceptPayload reports whether the envelope may be acknowledged: false only when the event was not
// taken (shutting down, or the database is down), so that Slack redelivers it.
func (a *Adapter) acceptPayload(ctx context.Context, payload json.RawMessage, retry int) bool {
	env, err := parseEnvelope(payload)
	if err != nil {
		a.log.Warn("ignored an unusable Socket Mode payload", zap.Error(err))
		return true
	}
	if retry > 0 {
		a.log.Debug("Slack redelivery", zap.String("event", env.EventID), zap.Int("retry", retry))
	}
	if env.Type != "event_callback" {
		a.log.Debug("ignored a Socket Mode payload", zap.String("type", env.Type))
		return true
	}
	if !a.accept(ctx, env) {
		a.log.Warn("event left unacknowledged: not taken", zap.String("event", env.EventID))
		return false
	}
	a.opts.Metrics.ChatEvent(platform, bot.ChatAck)
	return true
}
