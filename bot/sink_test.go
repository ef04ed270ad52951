package bot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// chatReplier records what the bot says in a thread; posted receives every post.
type chatReplier struct {
	mu     sync.Mutex
	posts  []string
	reacts []string
	posted chan string
}

var _ Replier = (*chatReplier)(nil)

func newChatReplier() *chatReplier { return &chatReplier{posted: make(chan string, 100)} }

func (r *chatReplier) Post(_ context.Context, text string) error {
	r.mu.Lock()
	r.posts = append(r.posts, text)
	r.mu.Unlock()
	r.posted <- text
	return nil
}
func (r *chatReplier) Progress(context.Context, string) error { return nil }
func (r *chatReplier) Upload(context.Context, string, []byte) (string, error) {
	return "", fmt.Errorf("slack files.upload: %w", sandbox.ErrUnavailable)
}
func (r *chatReplier) React(_ context.Context, name string) error {
	r.mu.Lock()
	r.reacts = append(r.reacts, name)
	r.mu.Unlock()
	return nil
}
func (r *chatReplier) Limits() Limits {
	return Limits{MaxMessage: 4000, MaxChunks: 4, MaxFileBytes: 1 << 20}
}

// waitPost returns the first post containing want.
func (r *chatReplier) waitPost(t *testing.T, want string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case p := <-r.posted:
			if strings.Contains(p, want) {
				return p
			}
		case <-timeout:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("no post containing %q; posts: %q", want, r.posts)
		}
	}
}

func TestDeliverSaysWhatHappenedAndLogsTheRef(t *testing.T) {
	tests := []struct {
		name      string
		out       agentpool.Outcome
		wantPost  string
		wantRef   bool
		wantReact string
	}{
		{name: "stopped by the user", out: agentpool.Outcome{Cancelled: true, Err: agentpool.ErrCancelled}, wantPost: "Stopped."},
		{name: "reset before it ran", out: agentpool.Outcome{Cancelled: true, Err: agentpool.ErrReset},
			wantPost: "Not run: The thread was reset", wantRef: true},
		{name: "shutdown", out: agentpool.Outcome{Cancelled: true, Err: agentpool.ErrClosed},
			wantPost: "Not run: The bot is restarting", wantRef: true},
		{name: "lock lost mid-turn is a failure, not a stop", out: agentpool.Outcome{Cancelled: true, Err: agentpool.ErrLockLost},
			wantPost: "Sorry, that failed: A service I depend on", wantRef: true},
		{name: "sandbox failed", out: agentpool.Outcome{Err: &agentpool.Error{Code: agentpool.ESANDBOX, Op: "prepare sandbox", Err: errRawFailure}},
			wantPost: "Sorry, that failed: I could not get this thread's sandbox running", wantRef: true, wantReact: ReactError},
		{name: "interrupted", out: agentpool.Outcome{Err: agentpool.ErrInterrupted},
			wantPost: `send "retry"`, wantRef: true, wantReact: ReactError},
		{name: "cut after the agent got the prompt: interrupted, not run again",
			out:      agentpool.Outcome{Err: &agentpool.Error{Code: agentpool.EINTERRUPTED, Op: "prompt", Err: runtime.PromptCut(errRawFailure)}},
			wantPost: `a lost connection to its agent, before it finished. I did not run it again on my own, since it may have done part of its work: send "retry"`,
			wantRef:  true, wantReact: ReactError},
		{name: "refused by the model budget: worded here, in place of the recorded answer",
			out:      agentpool.Outcome{Answer: budgetThread.Error(), IsError: true, Refusal: budgetThread},
			wantPost: "This thread has used its model budget (15 of 15 tokens). Start a new thread to go on.", wantReact: ReactError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, logs := observed(zapcore.DebugLevel)
			r := newChatReplier()
			s := newReplySink(t.Context(), r, time.Millisecond, log)
			tt.out.TurnID = 7
			_, err := s.Deliver(t.Context(), tt.out)
			require.NoError(t, err)
			require.Len(t, r.posts, 1)
			post := r.posts[0]
			if tt.wantReact == "" {
				require.Empty(t, r.reacts, "a stopped turn gets no reaction")
			} else {
				require.Equal(t, []string{tt.wantReact}, r.reacts)
			}
			require.Contains(t, post, tt.wantPost)
			if tt.out.Refusal != nil {
				require.Equal(t, tt.wantPost, post, "the refusal's words, not its operator message")
			}
			for _, leak := range internalDetail {
				require.NotContains(t, post, leak)
			}
			ref := refOf(post)
			if !tt.wantRef {
				require.Empty(t, ref)
				return
			}
			entries := loggedWithRef(logs, ref)
			require.Len(t, entries, 1, "the failure is logged once, under the ref shown")
			require.Equal(t, int64(7), entries[0].ContextMap()["turn"])
			require.Equal(t, tt.out.Err.Error(), entries[0].ContextMap()["error"])
		})
	}
}

func TestFailedUploadShowsARefNotTheError(t *testing.T) {
	log, logs := observed(zapcore.InfoLevel)
	r := newChatReplier()
	s := newReplySink(t.Context(), r, time.Millisecond, log)
	_, err := s.Deliver(t.Context(), agentpool.Outcome{Answer: "ok", Artifacts: []agentpool.Artifact{{Name: "plot.png", Size: 3, Data: []byte("png")}}})
	require.NoError(t, err)
	note := r.posts[len(r.posts)-1]
	require.Contains(t, note, "not uploaded: plot.png (3 B): the upload failed, ref ")
	require.NotContains(t, note, "files.upload")
	entries := loggedWithRef(logs, refOf(note))
	require.Len(t, entries, 1)
	require.Contains(t, entries[0].ContextMap()["error"], "slack files.upload")
}

// minimalRuntime answers every prompt; the tests below fail before it is reached.
type minimalRuntime struct{}

var _ runtime.Runtime = minimalRuntime{}

func (minimalRuntime) Name() string                                  { return "minimal" }
func (minimalRuntime) Ensure(context.Context, sandbox.Sandbox) error { return nil }
func (minimalRuntime) Session(context.Context, sandbox.Sandbox, string, string) (string, bool, error) {
	return "s1", false, nil
}
func (minimalRuntime) Prompt(_ context.Context, _ sandbox.Sandbox, _ string, p runtime.Prompt, _ func(runtime.Event)) (runtime.Result, error) {
	return runtime.Result{Answer: "echo: " + p.Text}, nil
}
func (minimalRuntime) Abort(context.Context, sandbox.Sandbox, string) error { return nil }

// TestFailedTurnReplyCarriesTheLoggedRef runs a message through the handler and a real pool whose
// provider fails with the Docker daemon's own words: the user reads what happened, what to do and a
// ref; the log has the full error under that ref.
func TestFailedTurnReplyCarriesTheLoggedRef(t *testing.T) {
	st := dbtest.OpenSQLite(t)
	prov := sandboxfake.New()
	// The daemon stays down for longer than the turn waits for it (ProviderWait, short here).
	for range 50 {
		prov.FailNext("Create", fmt.Errorf("docker create: %w: %w: Cannot connect to the Docker daemon at unix:///var/run/docker.sock", sandbox.ErrUnavailable, sandbox.ErrNoEffect))
	}
	log, logs := observed(zapcore.InfoLevel)
	pool, err := agentpool.New(agentpool.Config{Deployment: "errmodel", Image: "img", ProviderWait: time.Millisecond},
		agentpool.Deps{Store: st, Provider: prov, Runtime: minimalRuntime{}, Logger: log})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Shutdown(context.Background()) })
	h := NewHandler(HandlerConfig{ProgressInterval: time.Millisecond}, pool, st, nil, log)

	r := newChatReplier()
	thread := SlackThread("T", "C", "1.1")
	require.NoError(t, h.Handle(t.Context(), Message{Thread: thread, ChannelID: "C", User: User{ID: "U"}, Text: "build it", EventID: "ev1"}, r))
	reply := r.waitPost(t, "Sorry, that failed")
	require.Contains(t, reply, "Try again in a few minutes", "what to do")
	for _, leak := range internalDetail {
		require.NotContains(t, reply, leak)
	}
	ref := refOf(reply)
	require.NotEmpty(t, ref, "the reply shows a ref: %q", reply)
	entries := loggedWithRef(logs, ref)
	require.Len(t, entries, 1, "one log line per failed turn")
	fields := entries[0].ContextMap()
	require.Equal(t, thread.String(), fields["thread"])
	require.Equal(t, string(agentpool.EUNAVAILABLE), fields["code"])
	require.Contains(t, fields["error"], "Cannot connect to the Docker daemon")

	require.NoError(t, h.Wait(t.Context()))
}

func TestSkippedLine(t *testing.T) {
	tests := []struct {
		skip agentpool.SkippedArtifact
		want string
	}{
		{agentpool.SkippedArtifact{Name: "output/display", Reason: agentpool.SkipNotDirectory},
			"not uploaded: output/display (0 B): not a directory (symlinks are never followed)"},
		{agentpool.SkippedArtifact{Name: "passwd", Reason: agentpool.SkipNotRegular}, "not uploaded: passwd (0 B): not a regular file"},
		{agentpool.SkippedArtifact{Name: "big.bin", Size: 12_345_678, Reason: agentpool.SkipFileTooLarge, Limit: 10 << 20},
			"not uploaded: big.bin (11.8 MiB): larger than the 10 MiB per-file limit"},
		{agentpool.SkippedArtifact{Name: "c", Size: 1, Reason: agentpool.SkipTooMany, Limit: 2}, "not uploaded: c (1 B): more than 2 files in one reply"},
		{agentpool.SkippedArtifact{Name: "c", Size: 60, Reason: agentpool.SkipReplyTooLarge, Limit: 150},
			"not uploaded: c (60 B): the reply's files would exceed the 150 B per-reply limit"},
		{agentpool.SkippedArtifact{Reason: agentpool.SkipUnchecked, Limit: 1000, Count: 7},
			"not uploaded: 7 more files: output/display holds more than 1000 files; only the first were checked"},
		{agentpool.SkippedArtifact{Name: "output/display", Reason: agentpool.SkipUnreadable}, "not uploaded: output/display (0 B): could not be read"},
		{agentpool.SkippedArtifact{Name: "output/display", Reason: agentpool.SkipUnreached, Limit: 256 << 20},
			"not uploaded: possibly more files: output/display holds more than one reply looks through (256 MiB of files too large to upload, or 2 GiB of others), so not all of it was checked"},
		{agentpool.SkippedArtifact{Reason: agentpool.SkipMore, Limit: 20, Count: 9980},
			"not uploaded: 9980 more files (only the first 20 skipped are listed)"},
	}
	for _, tt := range tests {
		t.Run(string(tt.skip.Reason), func(t *testing.T) {
			require.Equal(t, tt.want, skippedLine(tt.skip))
		})
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1 KiB", 1536: "1.5 KiB", 10 << 20: "10 MiB", 50 << 20: "50 MiB",
		3 << 30: "3 GiB", 5 << 40: "5 TiB", 1<<20 + 1: "1.0 MiB",
	} {
		require.Equal(t, want, HumanSize(n), n)
	}
}

// downReplier fails the posts whose index (from 0) is in down, with a rate limit past the wait.
type downReplier struct {
	chatReplier
	n       int
	down    func(i int) bool
	refused bool
	uploads bool // uploads get through
}

func (r *downReplier) Upload(ctx context.Context, name string, data []byte) (string, error) {
	if r.uploads {
		return "F-" + name, nil
	}
	return r.chatReplier.Upload(ctx, name, data)
}

func (r *downReplier) Post(ctx context.Context, text string) error {
	i := r.n
	r.n++
	if r.down(i) {
		if r.refused {
			return errors.New("channel_not_found")
		}
		return &RateLimitedError{RetryAfter: time.Hour}
	}
	return r.chatReplier.Post(ctx, text)
}

// TestDeliverSaysWhetherTheReplyGotThrough: a reply none of which reached the chat is reported as
// agentpool.ErrNotPosted (the pool posts it again later, without the reaction now); one posted in
// part is not (a repost would repeat what arrived).
func TestDeliverSaysWhetherTheReplyGotThrough(t *testing.T) {
	answer := agentpool.Outcome{TurnID: 3, Answer: "the answer"}
	tests := []struct {
		name        string
		out         agentpool.Outcome
		down        func(i int) bool
		refused     bool // the failures are refusals (channel_not_found), not rate limits
		uploads     bool // uploads get through
		wantNotPost bool
		wantErr     bool
		wantReacts  []string
	}{
		{name: "all through", out: answer, down: func(int) bool { return false }, wantReacts: []string{ReactDone}},
		{name: "nothing through", out: answer, down: func(int) bool { return true }, wantNotPost: true, wantErr: true},
		{name: "nothing through, refused for good", out: answer, down: func(int) bool { return true }, refused: true, wantErr: true},
		{name: "reposted: the note got through, the answer did not", out: agentpool.Outcome{TurnID: 3, Answer: "x", Redelivered: true},
			down: func(i int) bool { return i > 0 }, wantNotPost: true, wantErr: true},
		{name: "a failure's words did not get through", out: agentpool.Outcome{TurnID: 3, Err: agentpool.ErrInterrupted},
			down: func(int) bool { return true }, wantNotPost: true, wantErr: true},
		{name: "part through: the answer, not the list of files left out", out: agentpool.Outcome{TurnID: 3, Answer: "x", Replayed: true,
			Skipped: []agentpool.SkippedArtifact{{Name: "big.bin", Size: 1 << 30, Reason: agentpool.SkipFileTooLarge, Limit: 1 << 20}}},
			down: func(i int) bool { return i == 2 }, wantErr: true, wantReacts: []string{ReactDone}},
		// The remarks around an answer are no reply: with the answer lost, the turn is posted again.
		{name: "the replay note got through, the answer did not", out: agentpool.Outcome{TurnID: 3, Answer: "x", Replayed: true},
			down: func(i int) bool { return i > 0 }, wantNotPost: true, wantErr: true},
		{name: "the workspace and context notes got through, the answer did not", out: agentpool.Outcome{TurnID: 3, Answer: "x",
			Workspace: "(workspace: owner/repo)", Context: agentpool.ContextNote{Read: 2}},
			down: func(i int) bool { return i > 1 }, wantNotPost: true, wantErr: true},
		{name: "the list of files left out got through, the answer did not", out: agentpool.Outcome{TurnID: 3, Answer: "x",
			Skipped: []agentpool.SkippedArtifact{{Name: "big.bin", Size: 1 << 30, Reason: agentpool.SkipFileTooLarge, Limit: 1 << 20}}},
			down: func(i int) bool { return i == 0 }, wantNotPost: true, wantErr: true},
		// An upload is in the chat too: a repost would upload it a second time.
		{name: "the long answer's file got through, its text did not", out: agentpool.Outcome{TurnID: 3, Answer: strings.Repeat("word ", 5000)},
			down: func(int) bool { return true }, uploads: true, wantErr: true, wantReacts: []string{ReactDone}},
		{name: "a file got through, the text did not", out: agentpool.Outcome{TurnID: 3, Answer: "x",
			Artifacts: []agentpool.Artifact{{Name: "a.png", Data: []byte("png"), Size: 3}}},
			down: func(int) bool { return true }, uploads: true, wantErr: true, wantReacts: []string{ReactDone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, _ := observed(zapcore.DebugLevel)
			r := &downReplier{chatReplier: chatReplier{posted: make(chan string, 100)}, down: tt.down, refused: tt.refused, uploads: tt.uploads}
			s := newReplySink(t.Context(), r, time.Millisecond, log)
			_, err := s.Deliver(t.Context(), tt.out)
			require.Equal(t, tt.wantErr, err != nil, "%v", err)
			require.Equal(t, tt.wantNotPost, errors.Is(err, agentpool.ErrNotPosted), "%v", err)
			require.Equal(t, tt.wantReacts, r.reacts)
		})
	}
}

// progressReplier refuses the first final progress with a Retry-After and records the order of
// progress and posts.
type progressReplier struct {
	chatReplier
	mu      sync.Mutex
	events  []string
	refused bool
}

func (r *progressReplier) Progress(_ context.Context, text string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if strings.HasPrefix(text, "done") && !r.refused {
		r.refused = true
		return &RateLimitedError{RetryAfter: 5 * time.Second}
	}
	r.events = append(r.events, "progress: "+text)
	return nil
}

func (r *progressReplier) Post(ctx context.Context, text string) error {
	r.mu.Lock()
	r.events = append(r.events, "post: "+text)
	r.mu.Unlock()
	return r.chatReplier.Post(ctx, text)
}

// The final progress state refused with a Retry-After is shown after the wait, and after the answer
// (never racing its posts), instead of the progress reading "working…" for good.
func TestDeliverFinalProgressRateLimitedIsShownAfterTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, _ := observed(zapcore.DebugLevel)
		r := &progressReplier{chatReplier: chatReplier{posted: make(chan string, 100)}}
		s := newReplySink(context.Background(), r, time.Second, log)
		s.Progress(runtime.Event{Kind: runtime.EventText, Text: "compiling"})
		synctest.Wait()
		_, err := s.Deliver(context.Background(), agentpool.Outcome{TurnID: 3, Answer: "the answer"})
		require.NoError(t, err)
		time.Sleep(6 * time.Second)
		synctest.Wait()
		r.mu.Lock()
		defer r.mu.Unlock()
		require.Len(t, r.events, 3, "%q", r.events)
		require.Equal(t, "post: the answer", r.events[1])
		require.True(t, strings.HasPrefix(r.events[2], "progress: done in"), "%q", r.events)
	})
}

// smallReplier is a platform with Discord's 2,000-character messages.
type smallReplier struct{ chatReplier }

func (r *smallReplier) Limits() Limits {
	return Limits{MaxMessage: 2000, MaxChunks: 5, MaxFileBytes: 1 << 20}
}

// The list of files not uploaded (up to 20 skipped, plus every failed upload, with names of up to
// 120 characters) is longer than one message of a platform with short ones: it must be posted in
// messages the platform takes, not as one it refuses.
func TestDeliverFileNotesFitThePlatformsMessages(t *testing.T) {
	log, _ := observed(zapcore.DebugLevel)
	r := &smallReplier{chatReplier{posted: make(chan string, 100)}}
	out := agentpool.Outcome{TurnID: 3, Answer: "done"}
	for i := range 20 {
		out.Skipped = append(out.Skipped, agentpool.SkippedArtifact{Name: fmt.Sprintf("%03d-%s.csv", i, strings.Repeat("n", 100)),
			Size: 1 << 30, Reason: agentpool.SkipReplyTooLarge, Limit: 50 << 20})
	}
	out.Artifacts = []agentpool.Artifact{{Name: "a.png", Data: []byte("png"), Size: 3}} // its upload fails
	s := newReplySink(t.Context(), r, time.Millisecond, log)
	_, _ = s.Deliver(t.Context(), out)
	all := strings.Join(r.posts, "\n")
	for i := range 20 {
		require.Contains(t, all, fmt.Sprintf("%03d-", i), "every skipped file is named")
	}
	require.Contains(t, all, "not uploaded: a.png")
	for _, p := range r.posts {
		require.LessOrEqual(t, utf8.RuneCountInString(p), 2000, "a post the platform would refuse")
	}
}

// An agent that answered with a file alone (no text, or only whitespace) gets its file posted, not
// a "(no answer)" beside it that says it gave none. With nothing at all, "(no answer)" still says so.
func TestDeliverFileOnlyAnswer(t *testing.T) {
	for _, tt := range []struct {
		name      string
		out       agentpool.Outcome
		wantPosts []string
	}{
		{"a file and no text", agentpool.Outcome{TurnID: 3, Answer: " \n\t",
			Artifacts: []agentpool.Artifact{{Name: "plot.png", Data: []byte("png"), Size: 3}}}, nil},
		{"nothing", agentpool.Outcome{TurnID: 3, Answer: " "}, []string{"(no answer)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			log, _ := observed(zapcore.DebugLevel)
			r := &downReplier{chatReplier: chatReplier{posted: make(chan string, 100)}, down: func(int) bool { return false }, uploads: true}
			s := newReplySink(t.Context(), r, time.Millisecond, log)
			ids, err := s.Deliver(t.Context(), tt.out)
			require.NoError(t, err)
			require.Equal(t, tt.wantPosts, r.posts)
			require.Equal(t, []string{ReactDone}, r.reacts)
			for i, a := range tt.out.Artifacts {
				require.Equal(t, "F-"+a.Name, ids[i])
			}
		})
	}
}
