package agentpool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
)

func TestSanitizeName(t *testing.T) {
	long := strings.Repeat("a", 500) + ".pdf"
	tests := []struct {
		in, want string
	}{
		{"report.pdf", "report.pdf"},
		{"../evil", "evil"},
		{"../../etc/passwd", "passwd"},
		{`..\evil`, "evil"},
		{`C:\Users\x\evil.bat`, "evil.bat"},
		{"a/b/c.txt", "c.txt"},
		{"..", "file"},
		{"bad\x00na\x07me\x1b[31m.txt", "badname[31m.txt"},
		{"line\nbreak\r\ttab.txt", "line break tab.txt"},
		{"invoice\u202Efdp.exe", "invoicefdp.exe"},     // RTL override would show "invoiceexe.pdf"
		{"zero\u200Bwidth\uFEFF.txt", "zerowidth.txt"}, // invisible characters
		{"\u2066isolate\u2069.md", "isolate.md"},
		{long, strings.Repeat("a", 116) + ".pdf"},
		{"", "file"},
		{"   ", "file"},
		{".hidden", "hidden"},
		{"..hidden.txt", "hidden.txt"},
		{"-rf", "rf"},
		{"--.-x.sh", "x.sh"},
		{"  many   spaces \t here .txt", "many spaces here .txt"},
		{"trailing dots...", "trailing dots"},
		{"résumé 📄.pdf", "résumé 📄.pdf"},
		{"a<b>c:d\"e|f?g*h.txt", "a_b_c_d_e_f_g_h.txt"},
		{"bad\xffutf8.txt", "badutf8.txt"},
		{"x." + strings.Repeat("e", 200), "x." + strings.Repeat("e", 118)}, // a long "extension" is not kept
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := SanitizeName(tt.in)
			require.Equal(t, tt.want, got)
			require.LessOrEqual(t, utf8.RuneCountInString(got), DefaultArtifactMaxNameLen)
			require.Equal(t, got, SanitizeName(got), "sanitizing is idempotent")
		})
	}
	require.Equal(t, "aaaaaaaaaaa.pdf", sanitizeName(long, 15), "a smaller cap keeps the extension too")
}

func TestUniqueName(t *testing.T) {
	used := map[string]int{}
	var got []string
	for _, n := range []string{"report.pdf", "report.pdf", "report-2.pdf", "report.pdf", "notes", "notes"} {
		got = append(got, uniqueName(n, used))
	}
	require.Equal(t, []string{"report.pdf", "report-2.pdf", "report-2-2.pdf", "report-3.pdf", "notes", "notes-2"}, got)

	used = map[string]int{}
	long := strings.Repeat("b", 20) + ".txt"
	require.Equal(t, "bbbbbbbbbbbb.txt", uniqueNameLen(sanitizeName(long, 16), used, 16))
	require.Equal(t, "bbbbbbbbbb-2.txt", uniqueNameLen(sanitizeName(long, 16), used, 16), "the suffix fits the cap")
}

func TestArtifactLimitsDefaultsAndValidation(t *testing.T) {
	def := ArtifactLimits{}.withDefaults()
	require.Equal(t, ArtifactLimits{MaxFileBytes: 10 << 20, MaxTurnBytes: 50 << 20, MaxCount: 10, MaxNameLen: 120}, def)
	require.NoError(t, def.validate())
	for _, tt := range []struct {
		lim  ArtifactLimits
		want string
	}{
		{ArtifactLimits{MaxFileBytes: -1}, "MaxFileBytes = -1"},
		{ArtifactLimits{MaxFileBytes: 20 << 20, MaxTurnBytes: 10 << 20}, "MaxTurnBytes = 10485760: must be at least MaxFileBytes"},
		{ArtifactLimits{MaxCount: -2}, "MaxCount = -2"},
		{ArtifactLimits{MaxNameLen: 3}, "MaxNameLen = 3"},
	} {
		require.ErrorContains(t, tt.lim.withDefaults().validate(), tt.want)
	}
}

func TestCollectArtifactsCapsAndKinds(t *testing.T) {
	boom := errors.New("daemon went away")
	outage := fmt.Errorf("docker read: %w: daemon went away", sandbox.ErrUnavailable)
	tests := []struct {
		name        string
		box         *artBox
		lim         ArtifactLimits
		wantFound   []string // path=name
		wantSkipped []SkippedArtifact
		wantReads   []string
		wantErr     error
		// The same box read in one pass (ReadTree) gives the same files and skips, reading on its
		// own only wantTreeReads; listOnly cases are about files that change between listing and
		// reading, which a pass cannot see.
		wantTreeReads []string
		listOnly      bool
		// wantNoSumReads, when not nil, is what one pass that gives no digests reads on its own,
		// if that is not wantTreeReads.
		wantNoSumReads []string
		// seen: the thread uploaded these paths before, with the content of these digests.
		seen seenArtifacts
	}{
		{
			name: "no output/display",
			box:  &artBox{listErr: fmt.Errorf("list: %w", fs.ErrNotExist)},
		},
		{
			name:        "output/display is a symlink",
			box:         &artBox{listErr: fmt.Errorf("list: %w", sandbox.ErrNotRegular)},
			wantSkipped: []SkippedArtifact{{Name: "output/display", Reason: SkipNotDirectory}},
		},
		{
			name:        "output/display holds more entries than a listing may",
			box:         &artBox{listErr: fmt.Errorf("list: more than %d entries: %w", sandbox.MaxListEntries, sandbox.ErrTooLarge)},
			wantSkipped: []SkippedArtifact{{Name: "output/display", Reason: SkipUnchecked, Limit: sandbox.MaxListEntries}},
		},
		{
			name:    "listing fails",
			box:     &artBox{listErr: boom},
			wantErr: boom,
		},
		{
			name: "only regular files within the per-file cap are read",
			box: newArtBox().put("ok.txt", "hello").special("passwd", fs.ModeSymlink|0o777).
				special("null", fs.ModeDevice|fs.ModeCharDevice|0o666).special("sub", fs.ModeDir|0o755).
				put("sub/nested.txt", "nested").put("big.bin", strings.Repeat("x", 101)),
			lim:       ArtifactLimits{MaxFileBytes: 100},
			wantFound: []string{"ok.txt=ok.txt", "sub/nested.txt=nested.txt"},
			wantSkipped: []SkippedArtifact{
				{Name: "big.bin", Size: 101, Reason: SkipFileTooLarge, Limit: 100},
				{Name: "null", Reason: SkipNotRegular},
				{Name: "passwd", Reason: SkipNotRegular},
			},
			wantReads: []string{"ok.txt", "sub/nested.txt"},
		},
		{
			name:      "count cap",
			box:       newArtBox().put("a", "1").put("b", "2").put("c", "3").put("d", "4"),
			lim:       ArtifactLimits{MaxCount: 2},
			wantFound: []string{"a=a", "b=b"},
			wantSkipped: []SkippedArtifact{
				{Name: "c", Size: 1, Reason: SkipTooMany, Limit: 2},
				{Name: "d", Size: 1, Reason: SkipTooMany, Limit: 2},
			},
			wantReads: []string{"a", "b", "c", "d"},
		},
		{
			name: "per-turn byte cap",
			box: newArtBox().put("a", strings.Repeat("a", 60)).put("b", strings.Repeat("b", 60)).
				put("c", strings.Repeat("c", 60)).put("d", "small"),
			lim:         ArtifactLimits{MaxFileBytes: 100, MaxTurnBytes: 150},
			wantFound:   []string{"a=a", "b=b", "d=d"},
			wantSkipped: []SkippedArtifact{{Name: "c", Size: 60, Reason: SkipReplyTooLarge, Limit: 150}},
			wantReads:   []string{"a", "b", "c", "d"},
		},
		{
			// One pass keeps what a reply carries plus a file (here 200 bytes); a file it did not
			// keep is decided on its digest and size, and not read when the reply has no room
			// for it. Without a digest it is read, to know whether it changed.
			name: "more than one pass keeps",
			box: newArtBox().put("a", strings.Repeat("a", 60)).put("b", strings.Repeat("b", 60)).
				put("c", strings.Repeat("c", 60)).put("d", strings.Repeat("d", 60)).put("e", "small"),
			lim:            ArtifactLimits{MaxFileBytes: 100, MaxTurnBytes: 100, MaxCount: 10},
			wantFound:      []string{"a=a", "e=e"},
			wantSkipped:    []SkippedArtifact{{Name: "b", Size: 60, Reason: SkipReplyTooLarge, Limit: 100}, {Name: "c", Size: 60, Reason: SkipReplyTooLarge, Limit: 100}, {Name: "d", Size: 60, Reason: SkipReplyTooLarge, Limit: 100}},
			wantReads:      []string{"a", "b", "c", "d", "e"},
			wantNoSumReads: []string{"d"},
		},
		{
			// The files the pass kept were uploaded before; the one it passed over is new, and
			// read for the reply.
			name: "a file the pass did not keep, new, is read for the reply",
			box: newArtBox().put("a", strings.Repeat("a", 90)).put("b", strings.Repeat("b", 90)).
				put("c", strings.Repeat("c", 90)),
			seen:          seenArtifacts{"a": sha256Hex(strings.Repeat("a", 90)), "b": sha256Hex(strings.Repeat("b", 90))},
			lim:           ArtifactLimits{MaxFileBytes: 100, MaxTurnBytes: 100},
			wantFound:     []string{"c=c"},
			wantReads:     []string{"a", "b", "c"},
			wantTreeReads: []string{"c"},
		},
		{
			name:      "display names are sanitized and unique in the turn",
			box:       newArtBox().put("x/report.pdf", "1").put("y/report.pdf", "2").put("z/.report.pdf", "3").put("-w\u202E.txt", "4"),
			wantFound: []string{"-w\u202E.txt=w.txt", "x/report.pdf=report.pdf", "y/report.pdf=report-2.pdf", "z/.report.pdf=report-3.pdf"},
			wantReads: []string{"-w\u202E.txt", "x/report.pdf", "y/report.pdf", "z/.report.pdf"},
		},
		{
			name: "changed between listing and reading",
			box: func() *artBox {
				b := newArtBox().put("grew", "small").put("swapped", "file").put("gone", "soon").put("fine", "ok")
				b.data["grew"] = []byte(strings.Repeat("g", 200))
				b.readErr["swapped"] = fmt.Errorf("read: %w", sandbox.ErrNotRegular)
				delete(b.data, "gone")
				return b
			}(),
			lim:       ArtifactLimits{MaxFileBytes: 100},
			listOnly:  true,
			wantFound: []string{"fine=fine"},
			wantSkipped: []SkippedArtifact{
				{Name: "grew", Size: 101, Reason: SkipFileTooLarge, Limit: 100},
				{Name: "swapped", Size: 4, Reason: SkipNotRegular},
			},
			wantReads: []string{"fine", "gone", "grew", "swapped"},
		},
		{
			// Each skipped file is a line of the reply: 10,000 symlinks (a listing's bound) were
			// 10,000 lines, hundreds of chat messages. The list is capped, the rest counted.
			name: "skipped files beyond the listed cap are counted, not listed",
			box: func() *artBox {
				b := newArtBox()
				for i := range maxSkippedListed + 5 {
					b.special(fmt.Sprintf("l%03d", i), fs.ModeSymlink|0o777)
				}
				return b
			}(),
			wantSkipped: func() []SkippedArtifact {
				var want []SkippedArtifact
				for i := range maxSkippedListed {
					want = append(want, SkippedArtifact{Name: fmt.Sprintf("l%03d", i), Reason: SkipNotRegular})
				}
				return append(want, SkippedArtifact{Reason: SkipMore, Count: 5, Limit: maxSkippedListed})
			}(),
		},
		{
			name:      "read fails: the sandbox service is out",
			listOnly:  true,
			box:       func() *artBox { b := newArtBox().put("a", "1"); b.readErr["a"] = outage; return b }(),
			wantErr:   outage,
			wantReads: []string{"a"},
		},
		{
			// A path the daemon cannot open (too long for it: a 500), or any other failure that is
			// the file's own, costs that file, not the turn's other files.
			name: "read of one file fails",
			box: func() *artBox {
				b := newArtBox().put("a", "1").put("deep", "2").put("z", "3")
				b.readErr["deep"] = errors.New("docker stat: request returned 500 Internal Server Error")
				return b
			}(),
			listOnly:    true,
			wantFound:   []string{"a=a", "z=z"},
			wantSkipped: []SkippedArtifact{{Name: "deep", Size: 1, Reason: SkipUnreadable}},
			wantReads:   []string{"a", "deep", "z"},
		},
	}
	for _, tt := range tests {
		for _, mode := range []string{"list and read", "one pass", "one pass without digests"} {
			tree := mode != "list and read"
			if tree && tt.listOnly {
				continue
			}
			t.Run(tt.name+"/"+mode, func(t *testing.T) {
				box := tt.box.clone()
				box.tree, box.noSums = tree, mode == "one pass without digests"
				wantReads := tt.wantReads
				if tree {
					wantReads = tt.wantTreeReads
				}
				if box.noSums && tt.wantNoSumReads != nil {
					wantReads = tt.wantNoSumReads
				}
				var store db.ArtifactStore = noArtifacts{}
				if tt.seen != nil {
					store = tt.seen
				}
				found, skipped, err := CollectArtifacts(context.Background(), box, store, "web:t", tt.lim)
				require.ErrorIs(t, err, tt.wantErr)
				if tt.wantErr != nil {
					require.Nil(t, found)
					return
				}
				require.Equal(t, append([]string{}, tt.wantFound...), names(found))
				require.Equal(t, tt.wantSkipped, skipped)
				require.Equal(t, wantReads, box.readPaths())
				for _, a := range found {
					sum := sha256.Sum256(a.Data)
					require.Equal(t, hex.EncodeToString(sum[:]), a.SHA256)
					require.Equal(t, int64(len(a.Data)), a.Size)
					require.NotContains(t, string(a.Data), "root:x:0:0", "a special file's target was never read")
				}
			})
		}
	}
}

// A provider that stops its pass at a file of gigabytes (Tree.Partial) costs the files after it:
// the reply says some may not have been looked at, besides what was.
func TestCollectArtifactsPartialTree(t *testing.T) {
	box := newArtBox().put("a.txt", "a").put("z.txt", "z")
	box.entries = append(box.entries, sandbox.FileInfo{Path: "m-huge.bin", Size: 2 << 30, Mode: 0o644})
	box.tree, box.stopAt = true, "m-huge.bin"
	found, skipped, err := CollectArtifacts(context.Background(), box, noArtifacts{}, "web:t", ArtifactLimits{})
	require.NoError(t, err)
	require.Equal(t, []string{"a.txt=a.txt"}, names(found))
	require.Equal(t, []SkippedArtifact{
		{Name: "m-huge.bin", Size: 2 << 30, Reason: SkipFileTooLarge, Limit: DefaultArtifactMaxFileBytes},
		{Name: ArtifactDir, Reason: SkipUnreached, Limit: ArtifactSkipBytes},
	}, skipped)
	require.Empty(t, box.readPaths(), "nothing read on its own")
}

func TestCollectArtifactsUploadsOnlyNewOrChanged(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, _ *dbtest.Clock) {
		ctx := context.Background()
		turn := func(event string) int64 {
			tr, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: "web:art", PlatformEventID: event, Prompt: "p"})
			require.NoError(t, err)
			return tr.ID
		}
		box := newArtBox().put("a.txt", "v1").put("b.txt", "b")

		found, skipped, err := CollectArtifacts(ctx, box, st, "web:art", ArtifactLimits{})
		require.NoError(t, err)
		require.Empty(t, skipped)
		require.Equal(t, []string{"a.txt=a.txt", "b.txt=b.txt"}, names(found))
		// b.txt's upload failed on the platform: it is not recorded, so it is offered again.
		require.NoError(t, RecordArtifacts(ctx, st, turn("e1"), found, []string{"F1", ""}))

		found, _, err = CollectArtifacts(ctx, box, st, "web:art", ArtifactLimits{})
		require.NoError(t, err)
		require.Equal(t, []string{"b.txt=b.txt"}, names(found))
		require.NoError(t, RecordArtifacts(ctx, st, turn("e2"), found, []string{"F2"}))

		found, _, err = CollectArtifacts(ctx, box, st, "web:art", ArtifactLimits{})
		require.NoError(t, err)
		require.Empty(t, found, "nothing changed, nothing to upload")

		box.put("a.txt", "v2")
		found, _, err = CollectArtifacts(ctx, box, st, "web:art", ArtifactLimits{})
		require.NoError(t, err)
		require.Equal(t, []string{"a.txt=a.txt"}, names(found), "a changed file is uploaded again")
		require.NoError(t, RecordArtifacts(ctx, st, turn("e3"), found, []string{"F3"}))

		// Back to an earlier content: uploaded before with exactly this content, so not again.
		box.put("a.txt", "v1")
		found, _, err = CollectArtifacts(ctx, box, st, "web:art", ArtifactLimits{})
		require.NoError(t, err)
		require.Empty(t, found)

		// Another thread has its own history.
		found, _, err = CollectArtifacts(ctx, box, st, "web:other", ArtifactLimits{})
		require.NoError(t, err)
		require.Len(t, found, 2)

		// Recording against a missing turn fails, and says which file.
		err = RecordArtifacts(ctx, st, 1<<40, found, []string{"X", "Y"})
		require.ErrorIs(t, err, db.ErrNotFound)
		require.ErrorContains(t, err, "a.txt")
		require.ErrorContains(t, err, "b.txt")
	})
}

// FuzzSanitizeName checks what a display name may never be, whatever the agent named the file.
func FuzzSanitizeName(f *testing.F) {
	f.Add("report.pdf", 0)
	f.Add("../../etc/passwd", 5)
	f.Add("invoice\u202Efdp.exe", 100)
	f.Add("abc."+strings.Repeat("e", 15), 0)
	f.Add(" .x.eeeeeeeeeeeeeee", 0)
	f.Add("bad\xffutf8\x00.txt", 3)
	f.Fuzz(func(t *testing.T, name string, n int) {
		maxLen := minNameLen + int(uint(n)%200)
		got := sanitizeName(name, maxLen)
		requireDisplayName(t, got, maxLen)
		require.Equal(t, got, sanitizeName(got, maxLen), "sanitizing is idempotent")
	})
}

// FuzzUniqueName feeds a turn's worth of names through sanitizing and de-duplication: every result
// is a valid display name, and no two are equal.
func FuzzUniqueName(f *testing.F) {
	f.Add("report.pdf\nreport.pdf\nreport-2.pdf\nreport.pdf", 0)
	f.Add(strings.Repeat("x.eeeeeeeeeeeeeee\n", 12), 0)
	f.Add("a\na\na-2\na-2\na-2-2", 1)
	f.Fuzz(func(t *testing.T, list string, n int) {
		maxLen := minNameLen + int(uint(n)%200)
		used := map[string]int{}
		seen := map[string]bool{}
		for i, name := range strings.Split(list, "\n") {
			if i == 64 {
				break
			}
			got := uniqueNameLen(sanitizeName(name, maxLen), used, maxLen)
			requireDisplayName(t, got, maxLen)
			require.False(t, seen[got], "%q given twice", got)
			seen[got] = true
		}
	})
}

func requireDisplayName(t *testing.T, got string, maxLen int) {
	t.Helper()
	require.NotEmpty(t, got)
	require.True(t, utf8.ValidString(got), "%q", got)
	require.LessOrEqual(t, utf8.RuneCountInString(got), maxLen, "%q", got)
	require.False(t, strings.ContainsAny(got, `/\<>:"|?*`), "%q", got)
	require.False(t, strings.HasPrefix(got, ".") || strings.HasPrefix(got, "-") || strings.HasPrefix(got, " "), "%q", got)
	require.False(t, strings.HasSuffix(got, ".") || strings.HasSuffix(got, " "), "%q", got)
	require.NotContains(t, got, "  ")
	for _, r := range got {
		require.False(t, unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError, "%q holds %U", got, r)
		require.False(t, unicode.IsSpace(r) && r != ' ', "%q holds %U", got, r)
	}
}

// A provider that stops sending the files holds the answer back collectTimeout at most, and the
// answer goes out with a note that the files could not be read.
func TestFinishAnswerBoundsTheCollection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &Pool{log: zap.NewNop(), cfg: Config{}.withDefaults()}
		start := time.Now()
		out := p.finishAnswer(context.Background(), resolved{sb: stallingBox{newArtBox()}}, runtime.Result{Answer: "done"}, Outcome{TurnID: 1})
		require.Equal(t, collectTimeout, time.Since(start))
		require.Equal(t, "done", out.Answer)
		require.Equal(t, []SkippedArtifact{{Name: ArtifactDir, Reason: SkipUnreadable}}, out.Skipped)
	})
}
