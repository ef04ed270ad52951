package bot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
)

// Platform lets any process answer a turn recorded by another one (acknowledged means answered):
// each adapter registers one, and the handler rebuilds a recorded turn's Replier and attachments
// from what the adapter put in Message.Reply and File.Ref.
type Platform interface {
	// Name is the thread keys' platform ("slack", "web", …).
	Name() string
	// Restore rebuilds the Replier for a destination the adapter encoded in Message.Reply.
	Restore(reply json.RawMessage) (Replier, error)
	// OpenFile fetches an attachment by the reference the adapter put in File.Ref.
	OpenFile(ctx context.Context, ref string) (io.ReadCloser, error)
}

// FileDiscarder is a Platform whose attachments hold something until read (spool files): a turn
// restored from its record frees the ones it ends without reading, as the turn it was would have.
type FileDiscarder interface {
	DiscardFile(ref string)
}

// delivery is what a turn records of where its reply goes (db.Turn.Delivery). Version 1.
type delivery struct {
	V        int             `json:"v"`
	Platform string          `json:"platform"`
	Reply    json.RawMessage `json:"reply,omitempty"`
	Channel  string          `json:"channel,omitempty"`
	Files    []fileRef       `json:"files,omitempty"`
	Notes    []string        `json:"notes,omitempty"`
	// Earlier is the adapter's reference to the thread's earlier messages (EarlierReader).
	Earlier string `json:"earlier,omitempty"`
}

type fileRef struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
	Ref  string `json:"ref"`
}

// maxDeliveryBytes bounds a recorded delivery (references only, never file contents).
const maxDeliveryBytes = 64 << 10

func encodeDelivery(msg Message) (json.RawMessage, error) {
	d := delivery{V: 1, Platform: msg.Thread.Platform, Reply: msg.Reply, Channel: msg.ChannelID, Notes: msg.Notes}
	if msg.Earlier != nil {
		d.Earlier = msg.Earlier.Ref
	}
	for _, f := range msg.Files {
		d.Files = append(d.Files, fileRef{Name: f.Name, Size: f.Size, Ref: f.Ref})
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	if len(b) > maxDeliveryBytes {
		return nil, &agentpool.Error{Code: agentpool.ETOOLARGE, Op: "record reply address",
			Err: fmt.Errorf("%d bytes; the limit is %d", len(b), maxDeliveryBytes)}
	}
	return b, nil
}

// platforms is the registry of adapters that can restore replies.
type platforms struct {
	mu sync.RWMutex // protects m
	m  map[string]Platform
}

// RegisterPlatform makes turns of p's platform restorable. Register before the pool's first
// recovery pass (serve does, before it starts the loops).
func (h *Handler) RegisterPlatform(p Platform) {
	h.plat.mu.Lock()
	defer h.plat.mu.Unlock()
	if h.plat.m == nil {
		h.plat.m = map[string]Platform{}
	}
	h.plat.m[p.Name()] = p
}

func (h *Handler) platform(name string) (Platform, bool) {
	h.plat.mu.RLock()
	defer h.plat.mu.RUnlock()
	p, ok := h.plat.m[name]
	return p, ok
}

// errNoDelivery marks a turn recorded without a reply address (before durable turns existed).
var errNoDelivery = errors.New("the turn has no recorded reply address")

// Restore rebuilds a recorded turn's request for the pool (agentpool.Deps.Restore): its Replier
// through the platform's adapter, a reply sink, and attachments opened only when the turn runs.
func (h *Handler) Restore(ctx context.Context, t db.Turn) (agentpool.Request, error) {
	if len(t.Delivery) == 0 {
		return agentpool.Request{}, errNoDelivery
	}
	d, p, r, err := h.restoreDelivery(t.Delivery)
	if err != nil {
		return agentpool.Request{}, err
	}
	files := make([]agentpool.InboundFile, len(d.Files))
	for i, f := range d.Files {
		ref := f.Ref
		files[i] = agentpool.InboundFile{Name: f.Name, Size: f.Size, Open: func(ctx context.Context) (io.ReadCloser, error) {
			return p.OpenFile(ctx, ref)
		}}
		if fd, ok := p.(FileDiscarder); ok {
			files[i].Discard = func() { fd.DiscardFile(ref) }
		}
	}
	sink := newReplySink(context.WithoutCancel(ctx), r, h.cfg.ProgressInterval, h.log.With(zap.String("thread", t.ThreadKey)))
	sink.notes = d.Notes
	sink.met, sink.platform = h.cfg.Metrics, d.Platform
	return agentpool.Request{
		ThreadKey: t.ThreadKey, Platform: d.Platform, ChannelID: d.Channel, UserID: t.UserID,
		EventID: t.PlatformEventID, Text: t.Prompt, Files: files, Sink: sink, Delivery: t.Delivery,
		Context: restoredContext(p, d.Earlier),
	}, nil
}

// restoreDelivery reads a recorded delivery and rebuilds its Replier through its platform's adapter.
func (h *Handler) restoreDelivery(raw json.RawMessage) (delivery, Platform, Replier, error) {
	var d delivery
	if err := json.Unmarshal(raw, &d); err != nil {
		return d, nil, nil, fmt.Errorf("reading the reply address: %w", err)
	}
	p, ok := h.platform(d.Platform)
	if !ok {
		return d, nil, nil, fmt.Errorf("no %q adapter is running here", d.Platform)
	}
	r, err := p.Restore(d.Reply)
	if err != nil {
		return d, nil, nil, fmt.Errorf("restoring the %s reply address: %w", d.Platform, err)
	}
	return d, p, r, nil
}
