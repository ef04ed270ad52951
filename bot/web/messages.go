package web

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/threadbox/threadbox/bot"
)

// messageJSON is the body of POST /api/conversations/{id}/messages as JSON.
type messageJSON struct {
	Text string `json:"text"`
}

// acceptedJSON answers an accepted message.
type acceptedJSON struct {
	EventID string `json:"event_id"`
	Cursor  string `json:"cursor"`
}

// postMessage is POST /api/conversations/{id}/messages: JSON {"text"}, or multipart/form-data with
// a "text" field and "file" parts. It answers 202 once the message is queued for the bot; the bot's
// replies arrive on the event stream, tagged with the returned event_id.
func (s *Server) postMessage(w http.ResponseWriter, r *http.Request) {
	convID := r.PathValue("id")
	if !idPattern.MatchString(convID) {
		writeError(w, http.StatusBadRequest, "bad conversation id: want 1 to 64 of A-Z a-z 0-9 _ -")
		return
	}
	var (
		text  string
		files []bot.File
		err   error
	)
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "multipart/form-data" {
		text, files, err = s.readMultipart(w, r)
	} else {
		var req messageJSON
		err = decodeJSON(w, r, maxJSONBody, &req, false)
		text = req.Text
	}
	if err == nil {
		err = s.checkText(text, len(files))
	}
	if err != nil {
		discard(files)
		s.writeErr(w, err)
		return
	}
	eventID, err := messageEventID(convID, r.Header.Get("Idempotency-Key"))
	if err != nil {
		discard(files)
		s.writeErr(w, err)
		return
	}
	// Registered only now: a refused message leaves no empty conversation in the list.
	c := s.lookup(convID, true)
	id := identityFrom(r.Context())
	msg := bot.Message{
		Thread: bot.WebThread(c.id), ChannelID: c.id, User: id.user, Text: text, Files: files,
		EventID: eventID,
	}
	shown, cut := clip(text, displayTextMax)
	ev := Event{Type: EventMessage, At: s.now().UTC(), EventID: msg.EventID, User: id.actor(), Text: shown, Truncated: cut}
	for _, f := range files {
		ev.Files = append(ev.Files, FileRef{Name: f.Name, Size: f.Size})
	}
	// Published before it is queued, so the message is on every open page before any reply to it;
	// once, when the client sends it again.
	ev.digest = messageDigest(text, files)
	ev, same := c.publishMessage(ev)
	if !same {
		discard(files)
		writeError(w, http.StatusUnprocessableEntity, keyReusedText)
		return
	}
	if err := s.enqueue(r.Context(), c, msg); err != nil {
		discard(files) // not taken: no turn will read (and so remove) them
		s.notTaken(c, msg.EventID, err)
		s.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, acceptedJSON{EventID: msg.EventID, Cursor: s.cursor(ev.Seq)})
}

// keyReusedText answers a message sent under an Idempotency-Key that names another message.
const keyReusedText = "this Idempotency-Key already names another message in this conversation: send a new message under a new key"

// notTaken says on the conversation's pages that a message published there was not taken, so it
// does not sit there as if an answer were coming (the sender's page also gets the error; other open
// pages only see this).
func (s *Server) notTaken(c *conversation, eventID string, err error) {
	why := "the bot could not take it; send it again"
	var he *httpError
	if errors.As(err, &he) {
		why = he.msg
	}
	r := &replier{s: s, c: c, replyTo: eventID}
	_ = r.Post(context.Background(), "Not taken: "+why+".")
	_ = r.React(context.Background(), bot.ReactError)
}

// idempotencyKey is what a client may name a message with (the Idempotency-Key header): the page
// sends a message again under the same key after an error, so that a message the bot recorded
// before the error (its database answered late) is recognised as the same message, answered once,
// instead of being run a second time.
var idempotencyKey = regexp.MustCompile(`^[A-Za-z0-9_-]{16,64}$`)

// messageEventID is the message's event id (its turn's dedupe key): the client's key, scoped to the
// conversation, or a random one.
func messageEventID(conv, key string) (string, error) {
	if key == "" {
		return "web-" + randomID(12), nil
	}
	if !idempotencyKey.MatchString(key) {
		return "", errorf(http.StatusBadRequest, "bad Idempotency-Key: want 16 to 64 of A-Z a-z 0-9 _ -")
	}
	// ':' is in neither a conversation id nor a key, so no two conversations' keys make one id.
	return "web-" + conv + ":" + key, nil
}

// messageDigest identifies a message's content: its text and its files' names and sizes.
func messageDigest(text string, files []bot.File) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s", len(text), text)
	for _, f := range files {
		fmt.Fprintf(h, "|%d:%s:%d", len(f.Name), f.Name, f.Size)
	}
	return string(h.Sum(nil))
}

func (s *Server) checkText(text string, files int) error {
	if len(text) > s.maxText {
		return errorf(http.StatusRequestEntityTooLarge,
			"message too large: %s of text; the limit is %s (attach long input as a file instead)",
			bot.HumanSize(int64(len(text))), bot.HumanSize(int64(s.maxText)))
	}
	if strings.TrimSpace(text) == "" && files == 0 {
		return errorf(http.StatusBadRequest, "empty message: send some text or a file")
	}
	return nil
}

// readMultipart reads a "text" field and up to maxUploadFiles "file" parts, each within its cap.
// On error it has removed the files it spooled.
func (s *Server) readMultipart(w http.ResponseWriter, r *http.Request) (text string, files []bot.File, err error) {
	defer func() {
		if err != nil {
			discard(files)
			text, files = "", nil
		}
	}()
	r.Body = http.MaxBytesReader(w, r.Body, maxMultipartBody)
	mr, err := r.MultipartReader()
	if err != nil {
		return "", nil, errorf(http.StatusBadRequest, "malformed multipart body: %s", err.Error())
	}
	sawText := false
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return text, files, nil
		}
		if err != nil {
			return "", files, bodyError(err)
		}
		switch part.FormName() {
		case "text":
			if sawText {
				return "", files, errorf(http.StatusBadRequest, "send one text field: this message has more")
			}
			sawText = true
			b, err := readCapped(part, int64(s.maxText))
			if err != nil {
				return "", files, err
			}
			if !utf8.Valid(b) {
				// A JSON body's text is always UTF-8; this one must be too: PostgreSQL refuses to
				// store anything else, and the bot would answer 503 "try again" for ever.
				return "", files, errorf(http.StatusBadRequest, "the text field is not valid UTF-8")
			}
			text = string(b)
		case "file", "files":
			if len(files) == maxUploadFiles {
				return "", files, errorf(http.StatusRequestEntityTooLarge, "too many files: at most %d per message", maxUploadFiles)
			}
			name := path.Base(strings.ReplaceAll(part.FileName(), `\`, "/"))
			if name == "" || name == "." || name == "/" || name == ".." {
				return "", files, errorf(http.StatusBadRequest, "a file part needs a file name")
			}
			// The name the sandbox will give it, which the page shows too: without NUL (which the
			// bot cannot record: PostgreSQL's jsonb refuses \u0000), control or format characters
			// and invalid UTF-8.
			name = bot.FileName(name)
			f, err := s.spoolPart(name, part, maxUploadFile)
			if err != nil {
				return "", files, err
			}
			files = append(files, f)
		default:
			return "", files, errorf(http.StatusBadRequest, "unknown form field %q: send \"text\" and \"file\" parts", part.FormName())
		}
	}
}

func readCapped(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, bodyError(err)
	}
	if int64(len(b)) > limit {
		return nil, errorf(http.StatusRequestEntityTooLarge, "too large: the limit is %s per part", bot.HumanSize(limit))
	}
	return b, nil
}

func bodyError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errorf(http.StatusRequestEntityTooLarge, "request body too large: the limit is %s", bot.HumanSize(mbe.Limit))
	}
	return errorf(http.StatusBadRequest, "malformed multipart body: %s", err.Error())
}

// replier is a bot.Replier for one message in one conversation: each call becomes an event.
type replier struct {
	s       *Server
	c       *conversation
	replyTo string
}

var _ bot.Replier = (*replier)(nil)

func (r *replier) event(typ string) Event {
	return Event{Type: typ, At: r.s.now().UTC(), ReplyTo: r.replyTo}
}

// publish publishes ev in the conversation and marks it used, so a turn answering keeps it
// remembered.
func (r *replier) publish(ev Event) {
	r.c.publish(ev)
	r.s.touch(r.c)
}

// Post implements bot.Replier.
func (r *replier) Post(ctx context.Context, text string) error {
	ev := r.event(EventPost)
	ev.Text, ev.Truncated = clip(text, displayTextMax)
	r.publish(ev)
	return nil
}

// Progress implements bot.Replier: the page replaces the turn's progress with each one.
func (r *replier) Progress(ctx context.Context, text string) error {
	ev := r.event(EventProgress)
	ev.Text, ev.Truncated = clip(text, displayTextMax)
	r.publish(ev)
	return nil
}

// Upload implements bot.Replier: the bytes are kept in memory for GET /api/files/{id}.
func (r *replier) Upload(ctx context.Context, name string, data []byte) (string, error) {
	if int64(len(data)) > webLimits.MaxFileBytes {
		return "", fmt.Errorf("%s is %s; the web chat takes files up to %s", name, bot.HumanSize(int64(len(data))), bot.HumanSize(webLimits.MaxFileBytes))
	}
	ref, err := r.s.files.put(r.c.id, name, data, r.s.now())
	if err != nil {
		return "", err
	}
	ev := r.event(EventUpload)
	ev.File = &ref
	r.publish(ev)
	return ref.ID, nil
}

// React implements bot.Replier.
func (r *replier) React(ctx context.Context, name string) error {
	ev := r.event(EventReaction)
	ev.Reaction = name
	r.publish(ev)
	return nil
}

// Limits implements bot.Replier.
func (r *replier) Limits() bot.Limits { return webLimits }
