package agentpool

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/prompts"
)

// ChatContext is what a chat thread said before the bot was first asked in it. The adapter reads it
// when the turn runs, never while the platform waits for its acknowledgement, and caps it by its
// own configuration.
type ChatContext struct {
	// Messages are oldest first.
	Messages []ChatMessage
	// Omitted counts the earlier messages the caps left out.
	Omitted int
}

// ChatMessage is one earlier message of the thread.
type ChatMessage struct {
	Author string
	// Bot marks another integration's post (an alert, a CI report).
	Bot  bool
	At   time.Time
	Text string
}

// ContextNote says what a turn read of its chat thread, so the reply can tell the user.
type ContextNote struct {
	// Read is how many earlier messages went into the prompt; Omitted how many the caps left out.
	Read, Omitted int
	// Failed is set when the thread could not be read; the turn went on with the message alone.
	Failed bool
}

// chatContextTimeout bounds reading the thread: the turn goes on without it rather than wait.
const chatContextTimeout = 30 * time.Second

// NoteReadingThread is the status note while the thread's earlier messages are read (the bot words it).
const NoteReadingThread = "reading_thread"

// chatContext reads the thread's earlier messages for the thread's first turn, rendered for the
// prompt. A thread is past its first turn once any turn of it finished with an answer (a reset does
// not make it first again: "start fresh" means without the old conversation). Failing to read it
// never fails the turn: the note says so and the prompt goes without it.
func (p *Pool) chatContext(ctx context.Context, req Request, sess db.Session, emit func(runtime.Event)) (string, ContextNote) {
	if req.Context == nil || sess.HandoffNote != "" {
		// The hand-off note is written when a turn finishes with an answer (and cleared by a reset,
		// which the turns' own record still shows): with one, this is no first turn, and a warm
		// turn needs no query to know it.
		return "", ContextNote{}
	}
	log := p.log.With(zap.String("thread", req.ThreadKey))
	first, err := p.firstTurn(ctx, req.ThreadKey)
	if err != nil {
		log.Warn("checking for the thread's first turn; its earlier messages are not read", zap.Error(err))
		return "", ContextNote{Failed: true}
	}
	if !first {
		return "", ContextNote{}
	}
	emit(runtime.Event{Kind: runtime.EventStatus, Note: NoteReadingThread, At: p.now()})
	rctx, cancel := context.WithTimeout(ctx, chatContextTimeout)
	defer cancel()
	cc, err := req.Context(rctx)
	if err != nil {
		log.Warn("reading the thread's earlier messages", zap.Error(err))
		return "", ContextNote{Failed: true}
	}
	return RenderChatContext(cc), ContextNote{Read: len(cc.Messages), Omitted: cc.Omitted}
}

// firstTurn reports whether no turn of the thread has finished with an answer yet.
func (p *Pool) firstTurn(ctx context.Context, threadKey string) (bool, error) {
	turns, err := p.store.TurnTranscript(ctx, threadKey, db.TranscriptLimit{MaxTurns: p.cfg.Transcript.MaxTurns, MaxChars: 1 << 30})
	if err != nil {
		return false, fmt.Errorf("loading the thread's turns: %w", err)
	}
	for _, t := range turns {
		if t.Status == db.TurnDone {
			return false, nil
		}
	}
	return true, nil
}

// RenderChatContext renders the thread's earlier messages for the prompt (prompts.Chat).
func RenderChatContext(cc ChatContext) string {
	d := prompts.ChatData{Omitted: cc.Omitted}
	for _, m := range cc.Messages {
		at := ""
		if !m.At.IsZero() {
			at = m.At.UTC().Format("2006-01-02 15:04 UTC")
		}
		d.Messages = append(d.Messages, prompts.ChatMessage{Author: m.Author, Bot: m.Bot, At: at, Text: m.Text})
	}
	return prompts.Chat(d)
}

// withChatContext puts the thread's earlier messages before a replayed history: both are
// background the agent reads before the new message.
func withChatContext(chat, history string) string {
	switch {
	case chat == "":
		return history
	case history == "":
		return chat
	}
	return chat + "\n\n" + history
}
