package slackfake

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// A Peer is a fake Slack in a process of its own: the Web API the bot calls and the load generator
// that sends it events. Benchmarks use it so that what they measure is the bot's process alone: with
// the fake in the bot's process, the fake's own work (serving reactions.add and chat.postMessage,
// signing and sending events) ran on the bot's scheduler and heap, and a sender delayed by the bot's
// goroutines counted as a slow ack. The machine's CPUs are still shared, as they would be with any
// load generator on the same host.
//
// The peer is the test binary itself, started again with PeerEnv set: the package's TestMain must
// call ServePeerIfAsked first. Requests and answers are JSON lines on the child's stdin and stdout.
type Peer struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	outR io.Reader
	opts Options
	api  string

	mu sync.Mutex // one request at a time
}

// PeerEnv, set to "1", makes ServePeerIfAsked serve as a peer.
const PeerEnv = "THREADBOX_SLACKFAKE_PEER"

// peerMaxLine bounds one answer line (a burst's latencies: about 20 bytes per event).
const peerMaxLine = 64 << 20

// peerHello is the child's first line.
type peerHello struct {
	Options Options `json:"options"`
	APIURL  string  `json:"api_url"`
}

// peerReq is one request. Op "burst" sends N events at Rate per second to URL: mentions in Threads
// channels named Prefix plus two digits, from Users users, each with Text. Op "wait_reactions" waits
// until Count reactions named Name have been added in all, or Timeout passes.
type peerReq struct {
	Op      string        `json:"op"`
	URL     string        `json:"url,omitempty"`
	Burst   Burst         `json:"burst"`
	Name    string        `json:"name,omitempty"`
	Count   int           `json:"count,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"`
}

// peerResp is one answer: Err is set when the request failed.
type peerResp struct {
	Err     string          `json:"err,omitempty"`
	Latency []time.Duration `json:"latency,omitempty"`
	Errors  int             `json:"errors,omitempty"`
	Count   int             `json:"count,omitempty"`
}

// Burst describes the events of one open-loop burst: N mentions at Rate per second, spread over
// Threads channels (Prefix followed by two digits) and Users users, each saying Text.
type Burst struct {
	N       int    `json:"n"`
	Rate    int    `json:"rate"`
	Prefix  string `json:"prefix"`
	Threads int    `json:"threads"`
	Users   int    `json:"users"`
	Text    string `json:"text"`
}

// Events mints the burst's events on s.
func (b Burst) Events(s *Server) []Event {
	evs := make([]Event, b.N)
	for i := range evs {
		evs[i] = s.Mention(fmt.Sprintf("%s%02d", b.Prefix, i%max(1, b.Threads)), fmt.Sprintf("U%d", i%max(1, b.Users)), b.Text)
	}
	return evs
}

// peerGC is the peer's collector: it runs only once the heap reaches the limit. The peer stands for
// Slack, which is not on the bot's machine; its collections (every second or so at the benchmark's
// 2,000 events/s and as many reactions.add) delayed the events it sends, and a late event counts
// against the bot's ack, which the benchmark times from the event's scheduled send time. The limit
// keeps a long run bounded: a collection then marks only what is live, a few MB.
var peerGC = []string{"GOGC=off", "GOMEMLIMIT=512MiB"}

// StartPeer starts a peer with opts: this executable again, with PeerEnv set and the peer's own
// collector setting (peerGC). The peer stops when ctx ends or Close is called; its stderr is this
// process's.
func StartPeer(ctx context.Context, opts Options) (*Peer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("slackfake: peer: %w", err)
	}
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	// Later entries win over the inherited ones (make bench sets the bot's GOGC).
	cmd.Env = append(append(os.Environ(), PeerEnv+"=1"), peerGC...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("slackfake: peer: %w", err)
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("slackfake: peer: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("slackfake: peer: %w", err)
	}
	p := &Peer{cmd: cmd, in: in, out: bufio.NewScanner(outR), outR: outR}
	p.out.Buffer(nil, peerMaxLine)
	req, err := json.Marshal(opts)
	if err == nil {
		_, err = fmt.Fprintf(in, "%s\n", req)
	}
	var hello peerHello
	if err == nil {
		err = p.read(&hello)
	}
	if err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("slackfake: peer did not start: %w", err)
	}
	p.opts, p.api = hello.Options, hello.APIURL
	return p, nil
}

// Options returns the peer's resolved options (tokens, ids, secret).
func (p *Peer) Options() Options { return p.opts }

// APIURL is the peer's Web API base URL, with its trailing slash.
func (p *Peer) APIURL() string { return p.api }

// Pid is the peer's process id (benchmarks account its CPU apart from the bot's).
func (p *Peer) Pid() int { return p.cmd.Process.Pid }

// Burst sends b's events to eventsURL on an open loop (see OpenLoop) and returns each one's latency,
// in sending order, and how many were not answered 200.
func (p *Peer) Burst(eventsURL string, b Burst) ([]time.Duration, int, error) {
	resp, err := p.call(peerReq{Op: "burst", URL: eventsURL, Burst: b})
	return resp.Latency, resp.Errors, err
}

// WaitReactions waits until at least count reactions named name have been added in all, for up to
// timeout, and returns how many there are then (more than count says some were added twice).
func (p *Peer) WaitReactions(name string, count int, timeout time.Duration) (int, error) {
	resp, err := p.call(peerReq{Op: "wait_reactions", Name: name, Count: count, Timeout: timeout})
	return resp.Count, err
}

// Close stops the peer and waits for it to exit.
func (p *Peer) Close() error {
	_ = p.in.Close() // the peer exits at the end of its input
	// Whatever it still writes is read and dropped: a peer blocked on a full pipe (an answer left
	// half read) would never exit.
	_, _ = io.Copy(io.Discard, p.outR)
	return p.cmd.Wait()
}

func (p *Peer) call(req peerReq) (peerResp, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line, err := json.Marshal(req)
	if err != nil {
		return peerResp{}, fmt.Errorf("slackfake: peer %s: %w", req.Op, err)
	}
	if _, err := fmt.Fprintf(p.in, "%s\n", line); err != nil {
		return peerResp{}, fmt.Errorf("slackfake: peer %s: %w", req.Op, err)
	}
	var resp peerResp
	if err := p.read(&resp); err != nil {
		return peerResp{}, fmt.Errorf("slackfake: peer %s: %w", req.Op, err)
	}
	if resp.Err != "" {
		return resp, fmt.Errorf("slackfake: peer %s: %s", req.Op, resp.Err)
	}
	return resp, nil
}

func (p *Peer) read(v any) error {
	if !p.out.Scan() {
		if err := p.out.Err(); err != nil {
			return err
		}
		return io.ErrUnexpectedEOF
	}
	return json.Unmarshal(p.out.Bytes(), v)
}

// ServePeerIfAsked serves as a peer, and exits, when PeerEnv is set; otherwise it returns at once.
// Call it first in TestMain.
func ServePeerIfAsked() {
	if os.Getenv(PeerEnv) != "1" {
		return
	}
	if err := servePeer(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "slackfake peer:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// servePeer reads the options line, starts a fake, says hello, then answers requests until in ends.
// The end of in (Close, or the parent gone: killed, or timed out by go test without its cleanups)
// also stops the request under way, so the peer never outlives its parent by a burst or a wait.
func servePeer(in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() {
		return fmt.Errorf("no options: %w", errors.Join(sc.Err(), io.ErrUnexpectedEOF))
	}
	var opts Options
	if err := json.Unmarshal(sc.Bytes(), &opts); err != nil {
		return fmt.Errorf("options: %w", err)
	}
	s := New(opts)
	defer s.Close()
	enc := json.NewEncoder(out)
	if err := enc.Encode(peerHello{Options: s.Options(), APIURL: s.APIURL()}); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lines := make(chan []byte)
	var inErr error
	go func() {
		defer close(lines)
		defer cancel()
		for sc.Scan() {
			select {
			case lines <- append([]byte(nil), sc.Bytes()...):
			case <-ctx.Done():
				return
			}
		}
		inErr = sc.Err()
	}()
	for line := range lines {
		var req peerReq
		var resp peerResp
		if err := json.Unmarshal(line, &req); err != nil {
			resp.Err = err.Error()
		} else {
			resp = s.servePeerReq(ctx, req)
		}
		if ctx.Err() != nil {
			break // no one to answer
		}
		if err := enc.Encode(resp); err != nil {
			return err
		}
	}
	cancel()
	for range lines { // the reader's end
	}
	return inErr
}

func (s *Server) servePeerReq(ctx context.Context, req peerReq) peerResp {
	switch req.Op {
	case "burst":
		lat, errs := s.OpenLoop(ctx, req.URL, req.Burst.Events(s), req.Burst.Rate)
		return peerResp{Latency: lat, Errors: errs}
	case "wait_reactions":
		ctx, cancel := context.WithTimeout(ctx, req.Timeout)
		defer cancel()
		err := s.Wait(ctx, func() bool { return s.ReactionsAdded(req.Name) >= req.Count })
		if err != nil {
			return peerResp{Err: fmt.Sprintf("%d of %d %q reactions: %v", s.ReactionsAdded(req.Name), req.Count, req.Name, err)}
		}
		return peerResp{Count: s.ReactionsAdded(req.Name)}
	}
	return peerResp{Err: fmt.Sprintf("unknown op %q", req.Op)}
}

// OpenLoop sends evs to eventsURL at rate per second, each on its own goroutine at its scheduled
// time whether or not earlier ones were answered, and returns each one's latency from its scheduled
// time to the answer (so a stall shows up instead of slowing the sender down), and how many were
// not answered 200.
// When ctx ends, the events not yet sent are not sent (nor counted), and those under way are
// abandoned.
func (s *Server) OpenLoop(ctx context.Context, eventsURL string, evs []Event, rate int) ([]time.Duration, int) {
	interval := time.Second / time.Duration(max(1, rate))
	lat := make([]time.Duration, len(evs))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs int
	)
	start := time.Now()
	for i, ev := range evs {
		at := start.Add(time.Duration(i) * interval)
		// Pacing the sender is the load generator's job, not synchronisation.
		if !sleepUntil(ctx, at) {
			break
		}
		wg.Go(func() {
			res, err := s.Deliver(ctx, eventsURL, ev)
			lat[i] = time.Since(at)
			if err != nil || res.Status != 200 {
				mu.Lock()
				errs++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lat, errs
}

// sleepUntil sleeps until at, and reports false if ctx ended first.
func sleepUntil(ctx context.Context, at time.Time) bool {
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
