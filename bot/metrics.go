package bot

// ChatMetrics receives what the chat adapters and the handler see, per platform, for /metrics. bot
// imports no metrics library (DESIGN §2): cmd/threadbox/metrics implements it with Prometheus, and
// NopChatMetrics is the default. Methods must be cheap and must not block (they run before the ack).
type ChatMetrics interface {
	// ChatEvent counts one event of kind (one of the Chat* values) on platform.
	ChatEvent(platform, kind string)
	// Upload counts one file shared into a thread: outcome is UploadOK, UploadFailed or UploadSkipped.
	Upload(platform, outcome string)
}

// ChatEvent kinds.
const (
	// ChatReceived: an event the adapter read and verified (before dedupe and limits).
	ChatReceived = "received"
	// ChatDeduped: a redelivery, or one message under a second event id, dropped.
	ChatDeduped = "deduped"
	// ChatAck: an event acknowledged to the platform.
	ChatAck = "ack"
	// ChatRefusedSignature: a request that failed signature verification.
	ChatRefusedSignature = "refused_signature"
	// ChatRefusedRateLimit: a message over the user or channel rate limit.
	ChatRefusedRateLimit = "refused_rate_limit"
	// ChatRefusedAccess: a request from someone not allowed to make it (an admin command from a
	// non-admin; the platform allowlists use it too).
	ChatRefusedAccess = "refused_access"
)

// Upload outcomes.
const (
	UploadOK      = "ok"
	UploadFailed  = "failed"
	UploadSkipped = "skipped"
)

// NopChatMetrics records nothing.
type NopChatMetrics struct{}

var _ ChatMetrics = NopChatMetrics{}

// ChatEvent implements ChatMetrics.
func (NopChatMetrics) ChatEvent(string, string) {}

// Upload implements ChatMetrics.
func (NopChatMetrics) Upload(string, string) {}
