package web

import (
	"bytes"
	"fmt"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/threadbox/threadbox/bot"
)

// Artifacts are held in memory, not re-read from the sandbox: the web adapter has no sandbox access
// (and must not: it would bypass the pool's thread lock), and the turn already read the bytes. The
// store is capped; the oldest files go first, and after a restart every file is gone from here (it is
// still in the sandbox's output/display/).

// FileRef describes a file in an event.
type FileRef struct {
	ID          string `json:"id,omitempty"`
	Name        string `json:"name"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type,omitempty"`
	// URL fetches the bytes (GET /api/files/{id}); Image says the page may show it inline.
	URL   string `json:"url,omitempty"`
	Image bool   `json:"image,omitempty"`
}

type storedFile struct {
	ref  FileRef
	conv string
	data []byte
	at   time.Time
}

type fileStore struct {
	max int64

	// mu protects the following.
	mu    sync.Mutex
	used  int64
	order []string // ids, oldest first
	byID  map[string]*storedFile
}

func newFileStore(max int64) *fileStore {
	return &fileStore{max: max, byID: map[string]*storedFile{}}
}

// put keeps a copy of data and returns its reference.
func (f *fileStore) put(conv, name string, data []byte, now time.Time) (FileRef, error) {
	if int64(len(data)) > f.max {
		return FileRef{}, fmt.Errorf("%s (%s) is larger than the web chat's file memory (%s)", name, bot.HumanSize(int64(len(data))), bot.HumanSize(f.max))
	}
	ctype, image := contentType(name, data)
	id := randomID(16)
	ref := FileRef{ID: id, Name: name, Size: int64(len(data)), ContentType: ctype, URL: "/api/files/" + id, Image: image}
	sf := &storedFile{ref: ref, conv: conv, data: bytes.Clone(data), at: now}
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.used+ref.Size > f.max && len(f.order) > 0 {
		old := f.byID[f.order[0]]
		f.used -= old.ref.Size
		delete(f.byID, f.order[0])
		f.order = f.order[1:]
	}
	f.byID[id] = sf
	f.order = append(f.order, id)
	f.used += ref.Size
	return ref, nil
}

func (f *fileStore) get(id string) *storedFile {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byID[id]
}

// imageTypes are shown inline. SVG is not among them: it can carry script.
var imageTypes = map[string]string{
	".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp",
}

// textTypes are served inline as plain text: with nosniff, a browser never runs them.
var textTypes = map[string]bool{
	".txt": true, ".md": true, ".log": true, ".csv": true, ".json": true, ".yaml": true, ".yml": true,
	".go": true, ".py": true, ".sh": true, ".js": true, ".ts": true, ".diff": true, ".patch": true,
}

// contentType picks how a file is served. An image must also look like one, so a page that names
// its HTML "x.png" gets a download, not an inline render.
func contentType(name string, data []byte) (ctype string, image bool) {
	ext := strings.ToLower(path.Ext(name))
	if t, ok := imageTypes[ext]; ok && http.DetectContentType(data) == t {
		return t, true
	}
	if textTypes[ext] {
		return "text/plain; charset=utf-8", false
	}
	return "application/octet-stream", false
}

// serveFile is GET /api/files/{id}.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request) {
	f := s.files.get(r.PathValue("id"))
	if f == nil {
		writeError(w, http.StatusNotFound, "no such file: files are kept in memory and this one was dropped or the bot restarted; it is still in the sandbox's output/display/")
		return
	}
	h := w.Header()
	h.Set("Content-Type", f.ref.ContentType)
	// A file never runs as a page of this origin, whatever it contains.
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("Cache-Control", "private, max-age=3600, immutable")
	disp := "attachment"
	if f.ref.Image || strings.HasPrefix(f.ref.ContentType, "text/plain") {
		disp = "inline"
	}
	if v := mime.FormatMediaType(disp, map[string]string{"filename": f.ref.Name}); v != "" {
		disp = v
	}
	h.Set("Content-Disposition", disp)
	http.ServeContent(w, r, "", f.at, bytes.NewReader(f.data))
}
