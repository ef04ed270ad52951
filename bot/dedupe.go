package bot

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// redisTimeout bounds one Redis call on the ack path: a slow Redis must not push the ack past a
// platform's deadline (3 seconds on Slack and Discord); the in-process fallback (and the store's turn
// dedupe) cover the gap.
const redisTimeout = 300 * time.Millisecond

// Deduper remembers keys (event ids, channel/ts pairs) for a TTL. With Redis the memory is shared
// by every replica (SET NX EX); without it, or when Redis fails, an in-process LRU stands in.
type Deduper struct {
	rdb    *redis.Client
	prefix string
	ttl    time.Duration
	local  *TTLCache
	log    *zap.Logger
	brk    *redisBreaker
}

func NewDeduper(rdb *redis.Client, prefix string, ttl time.Duration, now func() time.Time, log *zap.Logger) *Deduper {
	return &Deduper{rdb: rdb, prefix: prefix + "seen:", ttl: ttl, local: NewTTLCache(200_000, ttl, now), log: log,
		brk: &redisBreaker{now: now, log: log, what: "dedupe"}}
}

// PendingTTL is how long a mark set by FirstPending lasts until Confirm. A process that dies between
// marking an event and taking it (recording its turn) would otherwise leave a mark that drops the
// platform's redeliveries of an event nobody took, for the whole TTL: on Slack, every retry (at
// once, then after 1 and 5 minutes). A pending mark drops only those within it, which is what it is
// for: a retry sent while the first delivery is still being taken.
const PendingTTL = 30 * time.Second

// First reports whether key is seen for the first time, and marks it seen.
func (d *Deduper) First(ctx context.Context, key string) bool { return d.first(ctx, key, d.ttl) }

// Seen is what FirstPending found.
type Seen int

const (
	// SeenFirst: the key was not marked; it is now, pending.
	SeenFirst Seen = iota
	// SeenTaken: the key's event was taken (Confirm, or a mark set by First): a duplicate.
	SeenTaken
	// SeenPending: the key is marked but its event is not known to be taken; the delivery that
	// marked it may still fail (and withdraw it). A redelivery then must not be acknowledged as a
	// duplicate: nobody might answer it.
	SeenPending
)

// Mark values: a pending mark and a taken one (First's marks, and those set before pending marks
// existed, read as taken).
const (
	markPending = "p"
	markTaken   = "t"
)

// FirstPending is First with a mark that lasts PendingTTL until Confirm makes it last the TTL, and
// that says whether its event is taken yet. With no Redis the marks live in this process and die
// with it, so the pending stage's lifetime is Redis's only.
func (d *Deduper) FirstPending(ctx context.Context, key string) Seen {
	if d.rdb != nil && d.brk.try() {
		rctx, cancel := context.WithTimeout(ctx, redisTimeout)
		seen, err := d.firstPendingRedis(rctx, key)
		cancel()
		d.brk.result(err)
		if err == nil {
			// Mirrored locally, so that a Redis outage later does not forget what was seen.
			d.local.addOrGet(key, seenValue(seen))
			return seen
		}
	}
	old, added := d.local.addOrGet(key, markPending)
	switch {
	case added:
		return SeenFirst
	case old == markPending:
		return SeenPending
	}
	return SeenTaken
}

func (d *Deduper) firstPendingRedis(ctx context.Context, key string) (Seen, error) {
	ok, err := d.rdb.SetNX(ctx, d.prefix+key, markPending, min(PendingTTL, d.ttl)).Result()
	if err != nil || ok {
		return SeenFirst, err
	}
	// A second round trip, for duplicates only.
	v, err := d.rdb.Get(ctx, d.prefix+key).Result()
	switch {
	case errors.Is(err, redis.Nil) || (err == nil && v == markPending):
		// Gone since (withdrawn, lapsed): its delivery was not taken, or not yet; this one is
		// not taken either, and is redelivered.
		return SeenPending, nil
	case err != nil:
		return SeenFirst, err
	}
	return SeenTaken, nil
}

func seenValue(s Seen) string {
	if s == SeenTaken {
		return markTaken
	}
	return markPending
}

func (d *Deduper) first(ctx context.Context, key string, ttl time.Duration) bool {
	if d.rdb != nil && d.brk.try() {
		rctx, cancel := context.WithTimeout(ctx, redisTimeout)
		ok, err := d.rdb.SetNX(rctx, d.prefix+key, 1, ttl).Result()
		cancel()
		d.brk.result(err)
		if err == nil {
			// Mirror it locally, so that a Redis outage later does not forget what was seen.
			d.local.Add(key)
			return ok
		}
	}
	return d.local.Add(key)
}

// Confirm makes FirstPending marks last the full TTL, once their event is taken, in one round
// trip. A failure leaves them pending: a redelivery after PendingTTL is then taken again, and the
// store's own dedupe of recorded turns still holds.
func (d *Deduper) Confirm(ctx context.Context, keys ...string) {
	for _, k := range keys {
		d.local.replace(k, markTaken)
	}
	if d.rdb == nil || len(keys) == 0 || !d.brk.try() {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	_, err := d.rdb.Pipelined(rctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.SetXX(rctx, d.prefix+k, markTaken, d.ttl)
		}
		return nil
	})
	if errors.Is(err, redis.Nil) {
		err = nil // a mark gone already (lapsed): nothing to make last
	}
	d.brk.result(err)
	if err != nil {
		d.log.Debug("redis dedupe: confirming marks", zap.Error(err))
	}
}

// Forget withdraws a mark, for an event that was marked but then not taken. It asks Redis even
// while the breaker pauses it: the mark may be there from before the failure, and left there it
// would drop the platform's redelivery (here once the pause ends, or on another replica) as a
// duplicate of a message nobody took. An event not taken is rare; the wait is worth it.
func (d *Deduper) Forget(ctx context.Context, key string) {
	d.local.Remove(key)
	if d.rdb == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	err := d.rdb.Del(rctx, d.prefix+key).Err()
	d.brk.result(err)
	if err != nil {
		d.log.Warn("redis dedupe: withdrawing a mark", zap.Error(err))
	}
}

// TTLCache is a bounded set of keys that expire: an LRU by insertion, good enough for dedupe marks
// and small lookups. It is safe for concurrent use.
type TTLCache struct {
	max int
	ttl time.Duration
	now func() time.Time

	// mu protects the following.
	mu    sync.Mutex
	order *list.List // of *ttlEntry, oldest at the front
	items map[string]*list.Element
}

type ttlEntry struct {
	key   string
	val   string
	added time.Time
}

func NewTTLCache(max int, ttl time.Duration, now func() time.Time) *TTLCache {
	return &TTLCache{max: max, ttl: ttl, now: now, order: list.New(), items: map[string]*list.Element{}}
}

// Add inserts key and reports whether it was absent (or expired).
func (c *TTLCache) Add(key string) bool {
	return c.put(key, "", false)
}

// Set stores a value, replacing any.
func (c *TTLCache) Set(key, val string) { c.put(key, val, true) }

func (c *TTLCache) put(key, val string, replace bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.expireLocked(now)
	if e, ok := c.items[key]; ok {
		if !replace {
			return false
		}
		c.order.Remove(e)
	}
	c.items[key] = c.order.PushBack(&ttlEntry{key: key, val: val, added: now})
	for c.order.Len() > c.max {
		old := c.order.Remove(c.order.Front()).(*ttlEntry)
		delete(c.items, old.key)
	}
	return true
}

// addOrGet adds key with val if absent (or expired), reporting added; otherwise it returns the
// live value.
func (c *TTLCache) addOrGet(key, val string) (old string, added bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireLocked(c.now())
	if e, ok := c.items[key]; ok {
		return e.Value.(*ttlEntry).val, false
	}
	c.items[key] = c.order.PushBack(&ttlEntry{key: key, val: val, added: c.now()})
	for c.order.Len() > c.max {
		old := c.order.Remove(c.order.Front()).(*ttlEntry)
		delete(c.items, old.key)
	}
	return "", true
}

// replace sets a live key's value, leaving an absent one absent.
func (c *TTLCache) replace(key, val string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		e.Value.(*ttlEntry).val = val
	}
}

// Remove drops a key.
func (c *TTLCache) Remove(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		c.order.Remove(e)
		delete(c.items, key)
	}
}

// Get returns a live value.
func (c *TTLCache) Get(key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireLocked(c.now())
	e, ok := c.items[key]
	if !ok {
		return "", false
	}
	return e.Value.(*ttlEntry).val, true
}

// expireLocked drops entries older than the TTL; entries are in insertion order, so it stops at the
// first live one.
func (c *TTLCache) expireLocked(now time.Time) {
	for e := c.order.Front(); e != nil; e = c.order.Front() {
		ent := e.Value.(*ttlEntry)
		if now.Sub(ent.added) < c.ttl {
			return
		}
		c.order.Remove(e)
		delete(c.items, ent.key)
	}
}
