package agentpool

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// removingFile is a spool file as the bot's adapters hand it over: reading it to the end and closing
// it removes it.
type removingFile struct{ *os.File }

func (f removingFile) Close() error {
	err := f.File.Close()
	_ = os.Remove(f.Name())
	return err
}

// spooledFiles writes n files into dir as attachments that remove themselves once read, and are
// discarded (removed) by Discard.
func spooledFiles(t *testing.T, dir string, n int) []InboundFile {
	t.Helper()
	var files []InboundFile
	for i := range n {
		name := filepath.Join(dir, "spool-"+string(rune('a'+i)))
		require.NoError(t, os.WriteFile(name, []byte("content"), 0o600))
		files = append(files, InboundFile{Name: filepath.Base(name), Size: 7,
			Open: func(context.Context) (io.ReadCloser, error) {
				f, err := os.Open(name)
				if err != nil {
					return nil, err
				}
				return removingFile{f}, nil
			},
			Discard: func() { _ = os.Remove(name) },
		})
	}
	return files
}

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	return len(ents)
}

// TestEndedTurnLeavesNoAttachment: a submitted turn's attachments are the pool's to free. Whatever
// ends the turn here (answered, the sandbox not created so the files never opened, an attachment
// failing so the ones after it are never read, a reset dropping it from the queue), none is left on
// disk: nothing would ever read, and so remove, it.
func TestEndedTurnLeavesNoAttachment(t *testing.T) {
	tests := []struct {
		name string
		// run submits files (and whatever the case needs) and waits for the turn's outcome.
		run func(t *testing.T, files []InboundFile)
	}{
		{"answered", func(t *testing.T, files []InboundFile) {
			f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), &scriptRuntime{})
			sink := newCollector()
			submitFiles(t, f.pool, "web:f", "e1", files, sink)
			require.NoError(t, sink.wait(t, 1)[0].Err)
		}},
		{"sandbox not created", func(t *testing.T, files []InboundFile) {
			prov := sandboxfake.New()
			prov.FailNext("Create", errors.New("provider down after the request was sent"))
			f := newFixture(t, newSQLiteStore(t), prov, &scriptRuntime{})
			sink := newCollector()
			submitFiles(t, f.pool, "web:f", "e1", files, sink)
			require.Error(t, sink.wait(t, 1)[0].Err)
		}},
		{"an earlier attachment cannot be read", func(t *testing.T, files []InboundFile) {
			bad := InboundFile{Name: "gone", Open: func(context.Context) (io.ReadCloser, error) {
				return nil, errors.New("the platform refused the download")
			}}
			f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), &scriptRuntime{})
			sink := newCollector()
			submitFiles(t, f.pool, "web:f", "e1", append([]InboundFile{bad}, files...), sink)
			require.Error(t, sink.wait(t, 1)[0].Err)
		}},
		{"dropped from the queue by a reset", func(t *testing.T, files []InboundFile) {
			rt := &scriptRuntime{}
			started := make(chan struct{}, 1)
			rt.promptFunc = func(ctx context.Context, sb sandbox.Sandbox, sid string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
				started <- struct{}{}
				<-ctx.Done()
				return runtime.Result{}, ctx.Err()
			}
			f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), rt)
			sink := newCollector()
			submit(t, f.pool, "web:f", "e1", "long", sink)
			submitFiles(t, f.pool, "web:f", "e2", files, sink)
			<-started
			require.NoError(t, f.pool.Reset(context.Background(), "web:f"))
			for _, o := range sink.wait(t, 2) {
				require.ErrorIs(t, o.Err, ErrReset)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			files := spooledFiles(t, dir, 2)
			tt.run(t, files)
			require.Zero(t, countFiles(t, dir), "attachments left on disk")
		})
	}
}

func submitFiles(t *testing.T, p *Pool, thread, event string, files []InboundFile, sink Sink) {
	t.Helper()
	_, err := p.Submit(context.Background(), Request{ThreadKey: thread, Platform: "test", ChannelID: "c", UserID: "u",
		EventID: event, Text: "with files", Files: files, Sink: sink})
	require.NoError(t, err)
}

// TestTakenOverTurnLeavesNoAttachment: a turn whose process died while it ran is answered as
// interrupted by whoever takes it over (the recovery pass, or the next turn of its thread), and
// never runs again by itself (retry submits its prompt alone); one whose process died between its
// finish and its post is posted again by the recovery pass. Their attachments, which that process
// never discarded, are freed then: nothing else would ever remove them.
func TestTakenOverTurnLeavesNoAttachment(t *testing.T) {
	for _, via := range []string{"recovery pass", "next turn of the thread", "finished, never posted"} {
		t.Run(via, func(t *testing.T) {
			st := newSQLiteStore(t)
			ctx := t.Context()
			running, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: "web:f", PlatformEventID: "e1", UserID: "u",
				Prompt: "long job", Delivery: json.RawMessage(`{}`), Owner: "dead"})
			require.NoError(t, err)
			if via == "finished, never posted" {
				_, err = st.TurnFinish(ctx, running.ID, db.TurnResult{Status: db.TurnDone, Answer: "the answer", Owner: "dead"})
			} else {
				_, err = st.TurnStart(ctx, running.ID, "dead")
			}
			require.NoError(t, err)

			dir := t.TempDir()
			files := spooledFiles(t, dir, 2)
			sink := newCollector()
			p, err := New(Config{Deployment: "test-interrupted-files", Image: "img"}, Deps{
				Store: st, Provider: sandboxfake.New(), Runtime: &scriptRuntime{},
				Restore: func(_ context.Context, tr db.Turn) (Request, error) {
					return Request{Platform: "test", ChannelID: "c", UserID: tr.UserID, Text: tr.Prompt, Files: files, Sink: sink}, nil
				},
			})
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Shutdown(context.Background()) })

			switch via {
			case "finished, never posted":
				rep, err := p.RecoverPass(ctx)
				require.NoError(t, err)
				require.Equal(t, 1, rep.Redelivered)
				require.Equal(t, "the answer", sink.wait(t, 1)[0].Answer)
			case "recovery pass":
				rep, err := p.RecoverPass(ctx)
				require.NoError(t, err)
				require.Equal(t, 1, rep.Interrupted)
				require.ErrorIs(t, sink.wait(t, 1)[0].Err, ErrInterrupted)
			default:
				submit(t, p, "web:f", "e2", "next", sink)
				outs := sink.wait(t, 2)
				require.ErrorIs(t, outs[0].Err, ErrInterrupted)
				require.NoError(t, outs[1].Err)
			}
			require.Zero(t, countFiles(t, dir), "a dead process's turn's attachments left on disk")
		})
	}
}
