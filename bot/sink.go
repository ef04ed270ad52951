package bot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/agentpool/runtime"
)

// progressTail is how many recent output lines the progress message shows.
const progressTail = 8

// replySink adapts a Replier to the pool's Sink: progress goes through a coalescer into the single
// progress message; the outcome becomes the answer, the files, the skipped-file list and a reaction.
type replySink struct {
	r     Replier
	co    *Coalescer
	log   *zap.Logger
	start time.Time
	// notes are the adapter's remarks (attachments not used), posted with the outcome.
	notes []string
	// met counts uploads under platform.
	met      ChatMetrics
	platform string

	// mu protects the following.
	mu sync.Mutex
	// delivering: the outcome is being posted; late progress (a queued note, a straggling event) is
	// dropped so it cannot overwrite the final state.
	delivering bool
	status     string
	tail       []string
	tools      int
}

var _ agentpool.Sink = (*replySink)(nil)

func newReplySink(ctx context.Context, r Replier, interval time.Duration, log *zap.Logger) *replySink {
	s := &replySink{r: r, log: log, start: time.Now(), status: "working…", met: NopChatMetrics{}}
	s.co = NewCoalescer(ctx, interval, func(ctx context.Context, text string) error { return r.Progress(ctx, text) })
	return s
}

// countUpload counts one upload's outcome.
func (s *replySink) countUpload(err error) {
	if err != nil {
		s.met.Upload(s.platform, UploadFailed)
		return
	}
	s.met.Upload(s.platform, UploadOK)
}

// setStatus sets the progress headline.
func (s *replySink) setStatus(text string) {
	s.mu.Lock()
	if s.delivering {
		s.mu.Unlock()
		return
	}
	s.status = text
	out := s.renderLocked()
	s.mu.Unlock()
	s.co.Update(out)
}

// Progress implements agentpool.Sink.
func (s *replySink) Progress(ev runtime.Event) {
	s.mu.Lock()
	if s.delivering {
		s.mu.Unlock()
		return
	}
	switch ev.Kind {
	case runtime.EventTool:
		s.tools++
		s.status = fmt.Sprintf("working… (%d tool call(s); last: %s)", s.tools, oneLineCut(ev.Tool+" "+ev.Text, 120))
	case runtime.EventStatus:
		s.status = oneLineCut(statusText(ev), 200)
	default:
		if s.status != "working…" && !strings.HasPrefix(s.status, "working") {
			s.status = "working…"
		}
		for _, line := range strings.Split(strings.TrimRight(ev.Text, "\n"), "\n") {
			s.tail = append(s.tail, oneLineCut(line, 200))
		}
		if len(s.tail) > progressTail {
			s.tail = s.tail[len(s.tail)-progressTail:]
		}
	}
	out := s.renderLocked()
	s.mu.Unlock()
	s.co.Update(out)
}

func (s *replySink) renderLocked() string {
	if len(s.tail) == 0 {
		return s.status
	}
	return s.status + "\n```\n" + strings.ReplaceAll(strings.Join(s.tail, "\n"), "```", "'''") + "\n```"
}

// Deliver implements agentpool.Sink.
func (s *replySink) Deliver(ctx context.Context, out agentpool.Outcome) ([]string, error) {
	took := time.Since(s.start).Round(100 * time.Millisecond)
	final := fmt.Sprintf("done in %s", took)
	switch {
	case out.Cancelled:
		final = "stopped"
	case out.Err != nil:
		final = "failed"
	}
	s.mu.Lock()
	s.status, s.tail, s.delivering = final, nil, true
	s.mu.Unlock()
	s.co.Update(final)
	flushErr := s.co.Flush(ctx)
	if flushErr != nil {
		s.log.Debug("final progress update", zap.Error(flushErr))
	}
	defer func() {
		if _, ok := errors.AsType[*RateLimitedError](flushErr); ok {
			// The progress still shows "working…": show the final state after the platform's
			// wait, now that the reply is in the chat and no send can race its posts.
			s.co.Update(final)
		}
	}()

	var firstErr error
	posted := 0 // posts and uploads of the reply itself that got through
	post := func(text string) {
		err := s.r.Post(ctx, text)
		if err == nil {
			posted++
		} else if firstErr == nil {
			firstErr = err
		}
	}
	// note posts a remark around the reply (why it is reposted, the workspace, what the turn read,
	// a replay, files not attached): not counted, since alone it is no reply, and a turn whose
	// answer did not get through must stay undelivered to be posted again.
	note := func(text string) {
		if err := s.r.Post(ctx, text); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if out.Redelivered {
		note(redeliveredNote)
	}
	turn := zap.Int64("turn", out.TurnID)
	switch code := agentpool.ErrorCode(out.Err); {
	case out.Cancelled && (code == agentpool.ECANCELLED || out.Err == nil):
		// The user asked for it: nothing failed, nothing to look up.
		s.log.Debug("turn stopped", turn, zap.Error(out.Err))
		post("Stopped.")
	case out.Cancelled && (code == agentpool.ERESET || code == agentpool.ESHUTDOWN):
		post("Not run: " + Explain(s.log, "turn not run", out.Err, turn).String())
	case out.Err != nil:
		// The one log line of a failed turn: the full error, under the ref the user is shown.
		post("Sorry, that failed: " + Explain(s.log, "turn failed", out.Err, turn).String())
	}
	if out.Err == nil || out.Answer != "" {
		if out.Workspace != "" {
			note(out.Workspace)
		}
		if n := contextNote(out.Context); n != "" {
			note(n)
		}
		if out.Replayed || out.Recreate != "" {
			note(replayNote(out))
		}
		answer := out.Answer
		if out.Refusal != nil {
			// Refused, not failed (a budget used up): its own words, in place of the answer.
			answer = Explain(s.log, "turn refused", out.Refusal, turn).String()
		}
		lay := Layout{}
		if strings.TrimSpace(answer) != "" || len(out.Artifacts) == 0 {
			// A file alone is an answer: "(no answer)" beside it would say there was none.
			lay = LayoutAnswer(answer, s.r.Limits())
		}
		for _, c := range lay.Chunks {
			post(c)
		}
		if lay.File != nil {
			_, err := s.r.Upload(ctx, "answer.md", lay.File)
			s.countUpload(err)
			if err == nil {
				posted++ // the whole answer is in the chat: a repost would upload it again
			} else {
				p := Explain(s.log, "uploading the answer", err, turn)
				note(fmt.Sprintf("(The full answer could not be attached: the upload failed, ref %s.)", p.Ref))
			}
		}
	}
	ids := make([]string, len(out.Artifacts))
	notes := append([]string(nil), s.notes...)
	for _, sk := range out.Skipped {
		s.met.Upload(s.platform, UploadSkipped)
		notes = append(notes, skippedLine(sk))
	}
	limit := s.r.Limits().MaxFileBytes
	for i, a := range out.Artifacts {
		if limit > 0 && a.Size > limit {
			notes = append(notes, skippedLine(agentpool.SkippedArtifact{Name: a.Name, Size: a.Size, Reason: agentpool.SkipFileTooLarge, Limit: limit}))
			s.met.Upload(s.platform, UploadSkipped)
			continue
		}
		id, err := s.r.Upload(ctx, a.Name, a.Data)
		s.countUpload(err)
		if err == nil {
			posted++ // in the chat: the reply is posted in part, not reposted
		} else {
			p := Explain(s.log, "uploading a file", err, turn, zap.String("file", a.Name))
			notes = append(notes, fmt.Sprintf("not uploaded: %s (%s): the upload failed, ref %s", a.Name, HumanSize(a.Size), p.Ref))
			continue
		}
		ids[i] = id
	}
	// Up to 20 skipped files and every failed upload, one line each: more than one message holds
	// on a platform with short ones, which would refuse the list whole.
	for _, c := range Split(strings.Join(notes, "\n"), messageLimit(s.r.Limits())) {
		note(c)
	}
	react := ReactDone
	if out.Err != nil || out.IsError {
		react = ReactError
	}
	if out.Cancelled {
		react = ""
	}
	if react != "" && (posted > 0 || firstErr == nil) {
		_ = s.r.React(ctx, react)
	}
	if posted == 0 && RetryLater(firstErr) {
		// Nothing of the reply got through, for a reason that may pass: the pool keeps the turn
		// undelivered and posts it again later. (A refusal, such as an archived channel, would
		// be refused again.)
		return ids, fmt.Errorf("%w: %w", agentpool.ErrNotPosted, firstErr)
	}
	return ids, firstErr
}

// redeliveredNote heads a reply posted from the record: its process died while posting it, or the
// chat did not take it when it was ready.
const redeliveredNote = "(The reply to this message did not get through when it was ready (a restart, or the chat service refusing it), so here it is from my records. Files the agent made are not attached again; they are still in output/display/ of this thread's sandbox.)"

// skippedLine words a file that was not uploaded for the reply: "not uploaded: report.pdf (12.3 MiB):
// larger than the 10 MiB per-file limit".
func skippedLine(s agentpool.SkippedArtifact) string {
	var why string
	switch s.Reason {
	case agentpool.SkipUnchecked:
		return fmt.Sprintf("not uploaded: %d more files: %s holds more than %d files; only the first were checked",
			s.Count, agentpool.ArtifactDir, s.Limit)
	case agentpool.SkipUnreached:
		return fmt.Sprintf("not uploaded: possibly more files: %s holds more than one reply looks through (%s of files too large to upload, or %s of others), so not all of it was checked",
			agentpool.ArtifactDir, HumanSize(s.Limit), HumanSize(agentpool.ArtifactPassBytes))
	case agentpool.SkipMore:
		return fmt.Sprintf("not uploaded: %d more files (only the first %d skipped are listed)", s.Count, s.Limit)
	case agentpool.SkipNotDirectory:
		why = "not a directory (symlinks are never followed)"
	case agentpool.SkipNotRegular:
		why = "not a regular file"
	case agentpool.SkipFileTooLarge:
		why = "larger than the " + HumanSize(s.Limit) + " per-file limit"
	case agentpool.SkipTooMany:
		why = fmt.Sprintf("more than %d files in one reply", s.Limit)
	case agentpool.SkipReplyTooLarge:
		why = "the reply's files would exceed the " + HumanSize(s.Limit) + " per-reply limit"
	case agentpool.SkipUnreadable:
		why = "could not be read"
	default:
		why = "skipped"
	}
	return fmt.Sprintf("not uploaded: %s (%s): %s", s.Name, HumanSize(s.Size), why)
}

func oneLineCut(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// replayNote tells the user that the thread's sandbox or agent session is new, and, when an existing
// sandbox had to be replaced, why: their files from before may be gone.
func replayNote(out agentpool.Outcome) string {
	var why string
	switch out.Recreate {
	case agentpool.RecreateGone:
		why = "The previous sandbox was removed, so this thread got a new one; files from before are gone. "
	case agentpool.RecreateFailed:
		why = "The previous sandbox broke, so this thread got a new one; files from before are gone. "
	case agentpool.RecreateResumeFailed:
		why = "The previous sandbox failed to start several times, so this thread got a new one; files from before are gone. "
	case agentpool.RecreateUnusable:
		why = "The previous sandbox could not be reached with this configuration, so this thread got a new one. "
	case agentpool.RecreateMoved:
		why = "This thread moved to another sandbox provider, so it got a new sandbox there; files from before are gone. "
	case agentpool.RecreateDestroying:
		why = "The previous sandbox was being removed (a move or a reset), so this thread got a new one; files from before are gone. "
	}
	if why == "" {
		return fmt.Sprintf("(This thread's sandbox or agent session was new, generation %d: I replayed the conversation so far to it.)", out.Generation)
	}
	return fmt.Sprintf("(%sI replayed the conversation so far to it, generation %d.)", why, out.Generation)
}
