package docker_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// Each benchmark times the provider's operation and the same operation done with the raw Docker API,
// alternately in every iteration so that drift in the engine hits both alike. It reports:
//
//	ns/op      the provider
//	raw-ns/op  the raw Docker API
//	ratio      provider / raw (DESIGN §9 wants cold create and resume within 1.2 × raw)
//
// go test -run '^$' -bench . -benchtime=20x ./sandbox/docker/

type pair struct{ provider, raw time.Duration }

func (p pair) report(b *testing.B) {
	b.ReportMetric(float64(p.provider.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(p.raw.Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(p.provider)/float64(p.raw), "ratio")
}

func timed(b *testing.B, d *time.Duration, f func() error) {
	b.Helper()
	start := time.Now()
	err := f()
	*d += time.Since(start)
	require.NoError(b, err)
}

func benchSpec() sandbox.Spec {
	return sandbox.Spec{
		Image:  dockertest.Image(),
		Labels: sandbox.Labels{Deployment: "bench", Thread: "bench", Generation: 1},
	}
}

// rawRun is docker run -d --network none IMAGE: create and start, nothing else.
func rawRun(ctx context.Context, cli *client.Client) (string, error) {
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: dockertest.Image(), Labels: map[string]string{"threadbox.bench": "raw"}},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		return "", err
	}
	return c.ID, cli.ContainerStart(ctx, c.ID, container.StartOptions{})
}

// rawExec is docker exec ID true: create, attach (which starts it), drain, read the exit code.
func rawExec(ctx context.Context, cli *client.Client, id string) error {
	e, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return err
	}
	resp, err := cli.ContainerExecAttach(ctx, e.ID, container.ExecAttachOptions{})
	if err != nil {
		return err
	}
	defer resp.Close()
	if _, err := stdcopy.StdCopy(io.Discard, io.Discard, resp.Reader); err != nil {
		return err
	}
	for {
		ins, err := cli.ContainerExecInspect(ctx, e.ID)
		if err != nil || !ins.Running {
			return err
		}
	}
}

func rawRemove(ctx context.Context, cli *client.Client, id string) error {
	return cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
}

var execTrue = sandbox.ExecRequest{Cmd: []string{"true"}}

// BenchmarkCreateExecDestroy: a sandbox's whole life, against docker run + exec + rm -f.
func BenchmarkCreateExecDestroy(b *testing.B) {
	p := dockertest.New(b, docker.Options{})
	cli := rawClient(b)
	ctx := b.Context()
	var d pair
	for b.Loop() {
		timed(b, &d.provider, func() error {
			h, err := p.Create(ctx, benchSpec())
			if err != nil {
				return err
			}
			if _, err := p.Exec(ctx, h, execTrue); err != nil {
				return err
			}
			return p.Destroy(ctx, h)
		})
		timed(b, &d.raw, func() error {
			id, err := rawRun(ctx, cli)
			if err != nil {
				return err
			}
			if err := rawExec(ctx, cli, id); err != nil {
				return err
			}
			return rawRemove(ctx, cli, id)
		})
	}
	d.report(b)
}

// BenchmarkStart: resuming a stopped sandbox, against docker start. The stops are not timed.
func BenchmarkStart(b *testing.B) {
	p := dockertest.New(b, docker.Options{})
	cli := rawClient(b)
	ctx := b.Context()
	h, err := p.Create(ctx, benchSpec())
	require.NoError(b, err)
	b.Cleanup(func() { _ = p.Destroy(context.Background(), h) })
	id, err := rawRun(ctx, cli)
	require.NoError(b, err)
	b.Cleanup(func() { _ = rawRemove(context.Background(), cli, id) })
	stop := 5
	var d pair
	for b.Loop() {
		require.NoError(b, p.Stop(ctx, h))
		timed(b, &d.provider, func() error { return p.Start(ctx, h) })
		require.NoError(b, cli.ContainerStop(ctx, id, container.StopOptions{Timeout: &stop}))
		timed(b, &d.raw, func() error { return cli.ContainerStart(ctx, id, container.StartOptions{}) })
	}
	d.report(b)
}

// BenchmarkExec: one short command in a running sandbox, against docker exec.
func BenchmarkExec(b *testing.B) {
	p := dockertest.New(b, docker.Options{})
	cli := rawClient(b)
	ctx := b.Context()
	h, err := p.Create(ctx, benchSpec())
	require.NoError(b, err)
	b.Cleanup(func() { _ = p.Destroy(context.Background(), h) })
	var d pair
	for b.Loop() {
		timed(b, &d.provider, func() error { _, err := p.Exec(ctx, h, execTrue); return err })
		timed(b, &d.raw, func() error { return rawExec(ctx, cli, h.ID) })
	}
	d.report(b)
}

// BenchmarkCollect200Files: what collecting a turn's files costs when output/display holds 200 small
// ones, listed and then read one by one (before ReadTree) against ReadTree. It reports:
//
//	list-read-ns/op     ListFiles, then ReadFile per file
//	tree-ns/op          ReadTree
//	speedup             list-read / tree
//	list-read-calls/op  daemon calls of the first (counted once, through a proxy)
//	tree-calls/op       daemon calls of ReadTree
func BenchmarkCollect200Files(b *testing.B) {
	p := dockertest.New(b, docker.Options{})
	ctx := b.Context()
	h, err := p.Create(ctx, benchSpec())
	require.NoError(b, err)
	b.Cleanup(func() { _ = p.Destroy(context.Background(), h) })
	_, err = p.Exec(ctx, h, sandbox.ExecRequest{Cmd: []string{"sh", "-c",
		`mkdir -p output/display && cd output/display && for i in $(seq 1 200); do echo "small file $i" > f$i.txt; done`}})
	require.NoError(b, err)
	const dir = "output/display"
	lim := sandbox.TreeLimits{MaxFileBytes: 10 << 20}
	listRead := func(p *docker.Provider) error {
		list, err := p.ListFiles(ctx, h, dir)
		if err != nil {
			return err
		}
		for _, fi := range list {
			if fi.IsRegular() {
				if _, err := p.ReadFile(ctx, h, dir+"/"+fi.Path, lim.MaxFileBytes); err != nil {
					return err
				}
			}
		}
		return nil
	}
	readTree := func(p *docker.Provider) error {
		tree, err := p.ReadTree(ctx, h, dir, lim)
		if err == nil && len(tree.Files) != 200 {
			err = fmt.Errorf("read %d files, want 200", len(tree.Files))
		}
		return err
	}

	counted, count := dockertest.NewCounted(b, docker.Options{})
	require.NoError(b, listRead(counted))
	listCalls := len(count.Calls())
	count.Reset()
	require.NoError(b, readTree(counted))
	treeCalls := len(count.Calls())

	var before, after time.Duration
	for b.Loop() {
		timed(b, &before, func() error { return listRead(p) })
		timed(b, &after, func() error { return readTree(p) })
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(before.Nanoseconds())/float64(b.N), "list-read-ns/op")
	b.ReportMetric(float64(after.Nanoseconds())/float64(b.N), "tree-ns/op")
	b.ReportMetric(float64(before)/float64(after), "speedup")
	b.ReportMetric(float64(listCalls), "list-read-calls/op")
	b.ReportMetric(float64(treeCalls), "tree-calls/op")
}
