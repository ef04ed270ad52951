package db

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Transcript defaults (DESIGN §5: the hand-off note plus the last turns, ~12k characters).
const (
	DefaultTranscriptTurns = 20
	DefaultTranscriptChars = 12000
)

// batchLimit applies the DefaultBatch / MaxBatch rule to a caller's limit.
func batchLimit(n int) int {
	switch {
	case n <= 0:
		return DefaultBatch
	case n > MaxBatch:
		return MaxBatch
	}
	return n
}

func checkThreadKey(key string) error {
	if key == "" {
		return invalidf("empty thread key")
	}
	return checkKeyText("thread key", key)
}

// checkKeyText refuses a key PostgreSQL text cannot hold (NUL, invalid UTF-8), or longer than
// MaxKeyBytes (its btree indexes cannot; SQLite could store both). Keys are not
// repaired like free text (storableText): two different keys could become one.
func checkKeyText(what, key string) error {
	if len(key) > MaxKeyBytes {
		return invalidf("%s %q… is %d bytes, more than %d", what, key[:32], len(key), MaxKeyBytes)
	}
	if !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0 {
		return invalidf("%s %q is not valid UTF-8 without NUL", what, key)
	}
	return nil
}

// storableKey reports whether every key could name a row: the stores refuse keys with NUL or invalid
// UTF-8 (checkKeyText), and PostgreSQL fails a query that merely compares with one ("invalid byte
// sequence for encoding UTF8") where SQLite finds nothing, so a lookup by one answers "none" on both
// without asking.
func storableKey(keys ...string) bool {
	for _, k := range keys {
		if !utf8.ValidString(k) || strings.IndexByte(k, 0) >= 0 {
			return false
		}
	}
	return true
}

// storableText makes free text (prompts, answers, errors, notes: chat users' and agents' words)
// storable on both engines: PostgreSQL text refuses NUL and invalid UTF-8, so each run of invalid
// bytes and each NUL becomes U+FFFD, on SQLite too, so that the engines give back the same text.
func storableText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// StorableText is the text the stores give back for s: a caller comparing a recorded text with its
// own compares it with this.
func StorableText(s string) string { return storableText(s) }

func storableTextPtr(s *string) *string {
	if s == nil {
		return nil
	}
	v := storableText(*s)
	return &v
}

// storableJSON makes valid JSON storable on both engines: PostgreSQL jsonb refuses the escape
// \u0000 (json.Marshal writes it for a NUL in a string) and a surrogate escape that is not half of
// a pair (Go's decoder reads one as U+FFFD), so each becomes \ufffd, on SQLite too. In valid JSON
// a backslash only starts an escape inside a string, so a scan of escapes suffices.
func storableJSON(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			continue
		}
		if b[i+1] != 'u' {
			i++ // the escaped character
			continue
		}
		r := jsonEscape(b, i)
		switch {
		case r < 0: // not an escape we read: leave it for the server to judge
		case utf16.IsSurrogate(r) && r < 0xdc00 && utf16.DecodeRune(r, jsonEscape(b, i+6)) != unicode.ReplacementChar:
			i += 6 // the high half of a pair; the low half is skipped below
		case r == 0 || utf16.IsSurrogate(r):
			if out == nil {
				out = slices.Clone(b)
			}
			copy(out[i+2:i+6], "fffd")
		}
		i += 5
	}
	if out == nil {
		return b
	}
	return out
}

// jsonEscape reads the \uXXXX escape at b[i:], or returns -1.
func jsonEscape(b []byte, i int) rune {
	if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
		return -1
	}
	v, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
	if err != nil {
		return -1
	}
	return rune(v)
}

// clean makes the turn's prompt and delivery storable (storableText, storableJSON).
func (t NewTurn) clean() NewTurn {
	t.Prompt = storableText(t.Prompt)
	t.Delivery = storableJSON(t.Delivery)
	return t
}

// clean makes the result's answer, error and usage storable (storableText, storableJSON).
func (r TurnResult) clean() TurnResult {
	r.Answer, r.Error = storableText(r.Answer), storableText(r.Error)
	r.Usage = storableJSON(cleanUsageJSON(r.Usage))
	return r
}

// clean makes the patch's error, hand-off note and handle storable (storableText, storableJSON).
func (p SessionPatch) clean() SessionPatch {
	p.LastError, p.HandoffNote = storableTextPtr(p.LastError), storableTextPtr(p.HandoffNote)
	p.Handle = storableJSON(p.Handle)
	return p
}

func (s NewSession) normalize() (NewSession, error) {
	if err := checkThreadKey(s.ThreadKey); err != nil {
		return s, err
	}
	if err := checkNames("session", map[string]*string{"platform": &s.Platform, "channel": &s.ChannelID,
		"owner": &s.OwnerUserID, "provider": &s.Provider, "runtime": &s.Runtime}); err != nil {
		return s, err
	}
	if s.Status == "" {
		s.Status = SessionCreating
	}
	if !s.Status.Valid() {
		return s, invalidf("unknown session status %q", s.Status)
	}
	return s, nil
}

func (t Transition) check() error {
	if len(t.From) == 0 {
		return invalidf("transition to %q names no from-status", t.To)
	}
	for _, f := range t.From {
		if !f.Valid() {
			return invalidf("unknown session status %q", f)
		}
	}
	if !t.To.Valid() {
		return invalidf("unknown session status %q", t.To)
	}
	if err := t.Patch.check(); err != nil {
		return err
	}
	if t.BumpGeneration && t.Patch.Generation != nil {
		return invalidf("transition both bumps and sets the generation")
	}
	switch t.ResumeFail {
	case ResumeFailKeep, ResumeFailIncrement, ResumeFailReset:
	default:
		return invalidf("unknown ResumeFailOp %d", t.ResumeFail)
	}
	return nil
}

// arg is how the queries spell a ResumeFailOp.
func (op ResumeFailOp) arg() string {
	switch op {
	case ResumeFailIncrement:
		return "increment"
	case ResumeFailReset:
		return "reset"
	}
	return "keep"
}

// ifGeneration is the fenced generation, or 0 when the transition is not fenced (the query ignores it).
func (t Transition) ifGeneration() int64 {
	if t.IfGeneration == nil {
		return 0
	}
	return *t.IfGeneration
}

// conflict describes a transition that matched no row, from the row read right after it.
func (t Transition) conflict(threadKey string, cur Session) *TransitionError {
	e := &TransitionError{Entity: "session", Key: threadKey, From: t.fromStrings(), To: string(t.To), Actual: string(cur.Status)}
	if t.IfGeneration != nil {
		e.Generation, e.ActualGeneration = *t.IfGeneration, cur.Generation
	}
	return e
}

func (t Transition) fromStrings() []string {
	out := make([]string, len(t.From))
	for i, f := range t.From {
		out[i] = string(f)
	}
	return out
}

func (t NewTurn) check() error {
	if err := checkThreadKey(t.ThreadKey); err != nil {
		return err
	}
	if t.PlatformEventID == "" {
		return invalidf("turn for %s has no platform event id", t.ThreadKey)
	}
	if err := checkKeyText("platform event id", t.PlatformEventID); err != nil {
		return err
	}
	if err := checkKeyText("turn user", t.UserID); err != nil {
		return err
	}
	if t.Delivery != nil && !json.Valid(t.Delivery) {
		return invalidf("turn delivery is not valid JSON")
	}
	return nil
}

func (r TurnResult) check() error {
	if !r.Status.Finished() {
		return invalidf("turn cannot finish as %q", r.Status)
	}
	if r.Usage != nil && !json.Valid(r.Usage) {
		return invalidf("turn usage is not valid JSON")
	}
	return checkUsageJSON(r.Usage)
}

func (l TranscriptLimit) withDefaults() TranscriptLimit {
	if l.MaxTurns <= 0 {
		l.MaxTurns = DefaultTranscriptTurns
	}
	if l.MaxTurns > MaxBatch {
		l.MaxTurns = MaxBatch
	}
	if l.MaxChars <= 0 {
		l.MaxChars = DefaultTranscriptChars
	}
	return l
}

// maxTurnChars is the longest turn a transcript keeps: half the cap, so that one long turn neither
// fills the replay nor, skipped, hides the turns before it.
func (l TranscriptLimit) maxTurnChars() int { return max(1, l.MaxChars/2) }

// trimTranscript takes turns newest first, leaves out those longer than maxTurnChars, keeps the
// newest of the others whose prompts and answers fit in maxChars together, and returns them oldest
// first.
func trimTranscript(newestFirst []Turn, maxChars int) []Turn {
	perTurn := TranscriptLimit{MaxChars: maxChars}.maxTurnChars()
	out := make([]Turn, 0, len(newestFirst))
	used := 0
	for _, t := range newestFirst {
		c := utf8.RuneCountInString(t.Prompt) + utf8.RuneCountInString(t.Answer)
		if c > perTurn {
			continue
		}
		if used+c > maxChars {
			break
		}
		used += c
		out = append(out, t)
	}
	slices.Reverse(out)
	return out
}

func auditBefore(id int64) int64 {
	if id <= 0 {
		return math.MaxInt64
	}
	return id
}

// normalize checks an entry and escapes its text (see EscapeAuditText).
func (e AuditEntry) normalize() (AuditEntry, error) {
	if e.Actor == "" || e.Action == "" {
		return e, invalidf("audit entry needs an actor and an action")
	}
	e.Actor, e.Action, e.Target, e.Result = EscapeAuditText(e.Actor), EscapeAuditText(e.Action),
		EscapeAuditText(e.Target), EscapeAuditText(e.Result)
	return e, nil
}

// EscapeAuditText makes text safe to store and show in the audit log. Targets come from chat users:
// NUL cannot be stored in PostgreSQL text (the entry, and so the action, would fail), newlines,
// carriage returns and the line and paragraph separators (U+2028, U+2029: many viewers break lines
// at them) would forge extra lines in a listing, terminal escapes would act on an operator's
// terminal, and bidirectional overrides would show one thread key while storing another. Control,
// format and separator characters and invalid UTF-8 become \n, \xNN or \uNNNN; a backslash is doubled, so an
// escape in the log always means an escaped character.
func EscapeAuditText(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.In(r, unicode.Zl, unicode.Zp):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsEscape(s string) bool {
	if !utf8.ValidString(s) {
		return true
	}
	for _, r := range s {
		if r == '\\' || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.In(r, unicode.Zl, unicode.Zp) {
			return true
		}
	}
	return false
}

// clean makes the artifact's text storable (storableText): its path is a file name the agent chose,
// which may hold any bytes but NUL and '/'.
func (a NewArtifact) clean() NewArtifact {
	a.Path, a.SHA256, a.PlatformFileID = storableText(a.Path), storableText(a.SHA256), storableText(a.PlatformFileID)
	return a
}

func (a NewArtifact) check() error {
	if a.Path == "" || a.SHA256 == "" {
		return invalidf("artifact needs a path and a sha256")
	}
	if a.Size < 0 {
		return invalidf("artifact size %d", a.Size)
	}
	return nil
}

func turnKey(id int64) string { return fmt.Sprint(id) }

// turnFinishError explains a TurnFinish that changed nothing, given the turn as read after it.
func turnFinishError(cur Turn, res TurnResult) error {
	e := turnTransitionError(cur.ID, cur.Status, res.Status, []TurnStatus{TurnQueued, TurnRunning})
	if res.Owner != "" {
		e.Owner, e.ActualOwner = res.Owner, cur.Owner
	}
	return e
}

func turnTransitionError(id int64, actual, to TurnStatus, from []TurnStatus) *TransitionError {
	fs := make([]string, len(from))
	for i, f := range from {
		fs[i] = string(f)
	}
	return &TransitionError{Entity: "turn", Key: turnKey(id), From: fs, To: string(to), Actual: string(actual)}
}

func (p SessionPatch) check() error {
	if p.Handle != nil && !json.Valid(p.Handle) {
		return invalidf("session handle is not valid JSON")
	}
	if p.LastHealthOKAt != nil && p.LastHealthOKAt.IsZero() {
		return invalidf("LastHealthOKAt cannot be set to the zero time")
	}
	return checkNames("session", map[string]*string{"provider": p.Provider, "runtime": p.Runtime,
		"sandbox id": p.SandboxID, "agent session id": p.AgentSessionID})
}

// checkNames refuses identifiers (nil: not given) that PostgreSQL cannot store and SQLite can (NUL,
// invalid UTF-8): names are refused rather than altered, as keys are (checkKeyText), so that the
// engines agree. The agent's session id among them comes from the agent's own output.
func checkNames(what string, names map[string]*string) error {
	for name, v := range names {
		if v == nil {
			continue
		}
		if err := checkKeyText(what+" "+name, *v); err != nil {
			return err
		}
	}
	return nil
}

// nonEmpty drops empty ids: sessions without a sandbox have SandboxID "", and asking for "" would
// return all of them. It drops repeats too: SQLite asks in chunks, and an id in two chunks would
// return its row twice. And it drops ids that name no row (storableKey).
func nonEmpty(ids []string) []string {
	out := make([]string, 0, len(ids))
	seen := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		if _, dup := seen[id]; id != "" && !dup && storableKey(id) {
			seen[id] = struct{}{}
			out = append(out, id)
		}
	}
	return out
}

func sortSessionsByKey(ss []Session) {
	slices.SortFunc(ss, func(a, b Session) int { return strings.Compare(a.ThreadKey, b.ThreadKey) })
}

// claimFailed is the conflict of a claim whose expected owner no longer owns the turn (another process
// claimed it first, or it finished).
func claimFailed(id int64, from string) error {
	return fmt.Errorf("db: claim turn %s from %q: %w", turnKey(id), from, ErrConflict)
}
