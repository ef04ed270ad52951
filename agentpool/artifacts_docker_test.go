package agentpool

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// readSpy records the paths a Sandbox was asked to read, and how often it was asked to list.
type readSpy struct {
	sandbox.Sandbox
	mu    sync.Mutex // protects the following
	reads []string
	lists int
}

func (s *readSpy) ListFiles(ctx context.Context, dir string) ([]sandbox.FileInfo, error) {
	s.mu.Lock()
	s.lists++
	s.mu.Unlock()
	return s.Sandbox.ListFiles(ctx, dir)
}

func (s *readSpy) ReadFile(ctx context.Context, p string, max int64) ([]byte, error) {
	s.mu.Lock()
	s.reads = append(s.reads, strings.TrimPrefix(p, ArtifactDir+"/"))
	s.mu.Unlock()
	return s.Sandbox.ReadFile(ctx, p, max)
}

func (s *readSpy) takeReads() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.reads
	s.reads = nil
	return r
}

func shell(t *testing.T, sb sandbox.Sandbox, script string) {
	t.Helper()
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{
		Cmd: []string{"sh", "-c", script}, Stdout: &out, Stderr: &out, Timeout: time.Minute,
	})
	require.NoError(t, err)
	require.Zero(t, res.ExitCode, "%s: %s", script, out.String())
}

func TestDockerArtifacts(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, _ *dbtest.Clock) {
		ctx := context.Background()
		dep := "art-" + maintRandom()
		p := maintDocker(t, dep)
		const thread = "web:docker-art"
		sb := &readSpy{Sandbox: sandbox.Bind(p, maintDockerBox(t, p, dep, thread))}
		lim := ArtifactLimits{MaxFileBytes: 1 << 10, MaxTurnBytes: 4 << 10}
		collect := func() ([]Artifact, []SkippedArtifact) {
			t.Helper()
			found, skipped, err := CollectArtifacts(ctx, sb, st, thread, lim)
			require.NoError(t, err)
			return found, skipped
		}

		found, skipped := collect()
		require.Empty(t, found, "no output/display yet: nothing, and no error")
		require.Empty(t, skipped)

		shell(t, sb, `set -e
mkdir -p output/display/sub
printf hello > output/display/a.txt
printf nested > output/display/sub/n.txt
ln -s /etc/passwd output/display/passwd
printf x > 'output/display/..\evil.sh'
printf odd > "output/display/$(printf '.in\001voice\342\200\256fdp.exe')"
head -c 2048 /dev/zero > output/display/big.bin`)

		found, skipped = collect()
		require.Equal(t, []string{
			`..\evil.sh=evil.sh`,
			".in\x01voice\u202efdp.exe=invoicefdp.exe",
			"a.txt=a.txt",
			"sub/n.txt=n.txt",
		}, names(found))
		require.Equal(t, "hello", string(found[2].Data))
		require.Equal(t, []SkippedArtifact{
			{Name: "big.bin", Size: 2048, Reason: SkipFileTooLarge, Limit: 1024},
			{Name: "passwd", Reason: SkipNotRegular},
		}, skipped)
		require.Empty(t, sb.takeReads(), "listed and read in one pass (ReadTree), not file by file")
		require.Zero(t, sb.lists)
		for _, a := range found {
			require.NotContains(t, string(a.Data), "root:")
		}

		tr, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: thread, PlatformEventID: "e-" + maintRandom(), Prompt: "p"})
		require.NoError(t, err)
		ids := make([]string, len(found))
		for i := range ids {
			ids[i] = "F" + found[i].Name
		}
		require.NoError(t, RecordArtifacts(ctx, st, tr.ID, found, ids))

		found, skipped = collect()
		require.Empty(t, found, "uploaded once: not again while unchanged")
		require.Len(t, skipped, 2, "what cannot be uploaded is still reported")

		shell(t, sb, `printf changed > output/display/a.txt`)
		found, _ = collect()
		require.Equal(t, []string{"a.txt=a.txt"}, names(found), "again after it changed")
		require.Equal(t, "changed", string(found[0].Data))
	})
}

// Collecting a turn's files costs a few daemon calls whatever their number, and a file of gigabytes
// among them (sparse: free to make, but the daemon sends its holes as zeros) is not downloaded: it
// took a listing plus three calls per file (21 s for 200), and the listing downloaded everything.
func TestDockerArtifactsCost(t *testing.T) {
	ctx := context.Background()
	const thread = "web:docker-art-cost"
	sb, count := countedDockerBox(t, thread)
	shell(t, sb, `set -e
mkdir -p output/display && cd output/display
for i in $(seq 100 299); do echo "file $i" > f$i.txt; done
dd if=/dev/zero of=huge.bin bs=1 count=0 seek=1073741824 2>/dev/null`)

	count.Reset()
	found, skipped, err := CollectArtifacts(ctx, sb, noArtifacts{}, thread, ArtifactLimits{MaxCount: 1000})
	require.NoError(t, err)
	calls := count.Calls()
	require.LessOrEqual(t, len(calls), 3, "daemon calls, the first: %v", calls[:min(len(calls), 6)])
	require.Less(t, count.Bytes(), int64(16<<20), "the 1 GiB file was not downloaded")

	require.Len(t, found, 200)
	require.Equal(t, "f100.txt", found[0].Path)
	require.Equal(t, "file 100\n", string(found[0].Data))
	require.Equal(t, []SkippedArtifact{
		{Name: "huge.bin", Size: 1 << 30, Reason: SkipFileTooLarge, Limit: DefaultArtifactMaxFileBytes},
		// The pass stopped at huge.bin: the reply says it may have missed files after it.
		{Name: ArtifactDir, Reason: SkipUnreached, Limit: ArtifactSkipBytes},
	}, skipped)
}

// A long thread's output/display holds more than one collection keeps, nearly all of it uploaded
// before: the files the pass passed over are told unchanged by the digest it took on the way, not
// read again one by one, and only the new file is offered.
func TestDockerArtifactsUnchangedPastTheCapNotReadAgain(t *testing.T) {
	ctx := context.Background()
	const thread = "web:docker-art-seen"
	sb, count := countedDockerBox(t, thread)
	shell(t, sb, `set -e
mkdir -p output/display && cd output/display
for i in $(seq 100 299); do printf 'old file %0100d\n' $i > f$i.txt; done
echo new > zz-new.txt`)
	seen := seenArtifacts{}
	for i := 100; i < 300; i++ {
		sum := sha256.Sum256(fmt.Appendf(nil, "old file %0100d\n", i))
		seen[fmt.Sprintf("f%d.txt", i)] = hex.EncodeToString(sum[:])
	}

	count.Reset()
	// The pass keeps 2 KiB and a file: about twenty of the 200 old files.
	found, skipped, err := CollectArtifacts(ctx, sb, seen, thread, ArtifactLimits{MaxCount: 10, MaxTurnBytes: 1 << 10, MaxFileBytes: 1 << 10})
	require.NoError(t, err)
	require.Empty(t, skipped)
	require.Len(t, found, 1)
	require.Equal(t, "zz-new.txt", found[0].Path)
	calls := count.Calls()
	require.LessOrEqual(t, len(calls), 3, "no file read on its own; the first calls: %v", calls[:min(len(calls), 6)])
}

// countedDockerBox is a real Docker sandbox of thread, behind a proxy that counts the daemon calls.
func countedDockerBox(t *testing.T, thread string) (sandbox.Sandbox, *dockertest.Counter) {
	dep := "art-" + maintRandom()
	p, count := dockertest.NewCounted(t, docker.Options{Deployment: dep, StopTimeout: time.Second})
	return sandbox.Bind(p, maintDockerBox(t, p, dep, thread)), count
}

// seenArtifacts is an ArtifactStore that uploaded each path with the content whose digest it maps to.
type seenArtifacts map[string]string

func (seenArtifacts) ArtifactRecord(context.Context, db.NewArtifact) (db.Artifact, error) {
	return db.Artifact{}, errors.New("not recording")
}

func (s seenArtifacts) ArtifactLookup(_ context.Context, _, path, sum string) (db.Artifact, error) {
	if s[path] == sum {
		return db.Artifact{Path: path, SHA256: sum}, nil
	}
	return db.Artifact{}, db.ErrNotFound
}

// A turn that leaves more new files than a reply carries, or a file with many names (hard links
// cost the agent nothing), does not have the files past what the reply takes read one by one just
// to be listed as skipped: their digests and sizes decide. Each was three daemon calls (440 here;
// 10,000 links to a 10 MiB file were 1,000 reads, 10 GB).
func TestDockerArtifactsPastTheReplyNotRead(t *testing.T) {
	ctx := context.Background()
	dep := "art-" + maintRandom()
	p, count := dockertest.NewCounted(t, docker.Options{Deployment: dep, StopTimeout: time.Second})
	const thread = "web:docker-art-past"
	sb := &readSpy{Sandbox: sandbox.Bind(p, maintDockerBox(t, p, dep, thread))}
	shell(t, sb, `set -e
mkdir -p output/display && cd output/display
for i in $(seq 100 199); do head -c 1000 /dev/urandom > f$i.bin; done
for i in $(seq 10 59); do ln f100.bin link$i.bin; done`)

	count.Reset()
	// The pass keeps 5 KiB (five files); the reply takes four.
	found, skipped, err := CollectArtifacts(ctx, sb, noArtifacts{}, thread, ArtifactLimits{MaxCount: 10, MaxTurnBytes: 4 << 10, MaxFileBytes: 1 << 10})
	require.NoError(t, err)
	require.Equal(t, []string{"f100.bin=f100.bin", "f101.bin=f101.bin", "f102.bin=f102.bin", "f103.bin=f103.bin"}, names(found))
	require.Len(t, skipped, maxSkippedListed+1)
	require.Equal(t, SkippedArtifact{Name: "f104.bin", Size: 1000, Reason: SkipReplyTooLarge, Limit: 4 << 10}, skipped[0])
	require.Equal(t, SkippedArtifact{Reason: SkipMore, Count: 146 - maxSkippedListed, Limit: maxSkippedListed}, skipped[maxSkippedListed])
	require.Empty(t, sb.takeReads(), "no file read on its own")
	calls := count.Calls()
	require.LessOrEqual(t, len(calls), 3, "the first calls: %v", calls[:min(len(calls), 6)])
}

// listAndRead hides a sandbox's ReadTree: CollectArtifacts lists and reads file by file.
type listAndRead struct{ sandbox.Sandbox }

func (listAndRead) ReadTree(context.Context, string, sandbox.TreeLimits) (sandbox.Tree, error) {
	return sandbox.Tree{}, sandbox.ErrUnsupported
}

// What an agent can leave in output/display (FIFOs and hard links to them, a symlink and a hard
// link to it, names with a newline, control characters or 250 bytes, a file 30 directories deep,
// a hard link whose other name is outside, names that sanitize alike, more than a pass keeps, a
// file with many names, one over the cap) is collected in one pass as listing and reading file by
// file collects it: the same files and contents, skips and reasons, before and after some of them
// were uploaded and one changed.
func TestDockerArtifactsOnePassAsListAndRead(t *testing.T) {
	ctx := context.Background()
	dep := "art-" + maintRandom()
	p := maintDocker(t, dep)
	const thread = "web:docker-art-same"
	sb := sandbox.Bind(p, maintDockerBox(t, p, dep, thread))
	shell(t, sb, `set -e
mkdir -p output/display && cd output/display
mkfifo fifo && ln fifo fifo-link
ln -s /etc/passwd sym && ln sym sym-hard
printf nl > "$(printf 'new\nline.txt')"
printf ctl > "$(printf 'c\001\033[31mtl.txt')"
printf long > "$(head -c 246 /dev/zero | tr '\0' L).txt"
d=.; for i in $(seq 1 30); do d=$d/dddddddddddddddddddddddddddddddddddddddddddddddddd; done
mkdir -p $d && printf deep > $d/deep.txt
echo outside > ../../outside.txt && ln ../../outside.txt inside-link.txt
: > empty
for i in 1 2 3 4 5 6 7 8; do head -c 300 /dev/urandom > r$i; done
for i in 1 2 3 4 5 6; do ln r1 r1-link$i; done
mkdir x y && echo 1 > x/same.txt && echo 2 > y/same.txt
head -c 2000 /dev/zero > over.bin && ln over.bin over-link.bin`)
	seen := seenArtifacts{}
	for round := range 2 {
		for _, lim := range []ArtifactLimits{
			{MaxFileBytes: 1 << 10, MaxTurnBytes: 4 << 10, MaxCount: 100},
			{MaxFileBytes: 1 << 10, MaxTurnBytes: 1 << 10, MaxCount: 5},
		} {
			found, skipped, err := CollectArtifacts(ctx, sb, seen, thread, lim)
			require.NoError(t, err)
			wantFound, wantSkipped, err := CollectArtifacts(ctx, listAndRead{sb}, seen, thread, lim)
			require.NoError(t, err)
			require.NotEmpty(t, wantFound)
			require.Equal(t, names(wantFound), names(found), "round %d, %+v", round, lim)
			require.Equal(t, wantSkipped, skipped, "round %d, %+v", round, lim)
			for i, a := range found {
				require.Equal(t, wantFound[i].Data, a.Data, a.Path)
				require.Equal(t, wantFound[i].SHA256, a.SHA256, a.Path)
			}
			if lim.MaxCount == 100 && round == 0 {
				// Every other file is uploaded; then one changes.
				for i := 0; i < len(found); i += 2 {
					seen[found[i].Path] = found[i].SHA256
				}
			}
		}
		shell(t, sb, `head -c 300 /dev/urandom > output/display/r1`)
	}
}
