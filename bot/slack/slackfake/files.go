package slackfake

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
)

// maxUpload bounds one upload the fake accepts into memory.
const maxUpload = 256 << 20

// filesGetUploadURL is step 1 of the external upload flow: it reserves a file id and hands out an
// upload URL on the API's own scheme and host (slack-go sends the token only there).
func (s *Server) filesGetUploadURL(p map[string]string) (map[string]any, string) {
	name := p["filename"]
	n, err := strconv.Atoi(p["length"])
	if name == "" || err != nil || n <= 0 {
		return nil, "invalid_arguments"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextIDLocked("F")
	s.files[id] = &File{ID: id, Name: name, Length: n}
	s.changedLocked()
	return map[string]any{"upload_url": s.srv.URL + "/upload/v1/" + id, "file_id": id}, ""
}

// serveUpload is step 2: the bytes, as a multipart "file" field (what slack-go sends) or a raw body.
// A size that differs from the length given in step 1 fails like Slack's S3 upload does.
func (s *Server) serveUpload(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var data []byte
	var err error
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		r.Body = http.MaxBytesReader(w, r.Body, maxUpload)
		var f io.ReadCloser
		if f, _, err = r.FormFile("file"); err == nil {
			data, err = io.ReadAll(f)
			_ = f.Close()
		}
	} else {
		data, err = io.ReadAll(io.LimitReader(r.Body, maxUpload))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.files[id]
	switch {
	case !ok:
		http.Error(w, "Not Found", http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, "bad upload: "+err.Error(), http.StatusBadRequest)
		return
	case len(data) != f.Length:
		http.Error(w, fmt.Sprintf("s3_upload: got %d bytes, expected %d", len(data), f.Length), http.StatusInternalServerError)
		return
	}
	f.Data, f.Uploaded = data, true
	s.changedLocked()
	_, _ = fmt.Fprintf(w, "OK - %d", len(data))
}

// filesComplete is step 3: it finishes uploads and shares them into channel_id (and thread_ts).
func (s *Server) filesComplete(p map[string]string) (map[string]any, string) {
	var list []struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	}
	if err := json.Unmarshal([]byte(p["files"]), &list); err != nil || len(list) == 0 {
		return nil, "invalid_arguments"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, thread := p["channel_id"], p["thread_ts"]
	if thread != "" {
		if _, ok := s.messages[ch+"/"+thread]; !ok {
			return nil, "invalid_thread_ts"
		}
	}
	var out []any
	for _, e := range list {
		f, ok := s.files[e.ID]
		if !ok || !f.Uploaded {
			return nil, "file_not_found"
		}
		f.Title = e.Title
		if f.Title == "" {
			f.Title = f.Name
		}
		f.Channel, f.ThreadTS, f.Comment = ch, thread, p["initial_comment"]
		out = append(out, map[string]any{"id": f.ID, "title": f.Title})
	}
	s.changedLocked()
	return map[string]any{"files": out}, ""
}

// UserFile is a file attached to a user's message, as the event's "files" list carries it.
type UserFile struct {
	ID                 string `json:"id"`
	Name               string `json:"name"`
	Title              string `json:"title"`
	Mimetype           string `json:"mimetype"`
	Filetype           string `json:"filetype"`
	Size               int    `json:"size"`
	Mode               string `json:"mode"`
	URLPrivate         string `json:"url_private"`
	URLPrivateDownload string `json:"url_private_download"`
}

// AddUserFile stores a file a user uploads, served at its url_private to the bot token only.
func (s *Server) AddUserFile(user, name string, data []byte) UserFile {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextIDLocked("F")
	mt := mime.TypeByExtension(path.Ext(name))
	if mt == "" {
		mt = "application/octet-stream"
	}
	s.files[id] = &File{ID: id, Name: name, Title: name, Length: len(data), Data: data, Uploaded: true, Mimetype: mt, User: user}
	s.changedLocked()
	base := s.srv.URL + "/files-pri/" + s.opts.TeamID + "-" + id + "/"
	return UserFile{
		ID: id, Name: name, Title: name, Mimetype: mt, Filetype: strings.TrimPrefix(path.Ext(name), "."),
		Size: len(data), Mode: "hosted",
		URLPrivate: base + url.PathEscape(name), URLPrivateDownload: base + "download/" + url.PathEscape(name),
	}
}

// servePrivateFile serves url_private. Like files.slack.com, a request without a valid token is
// redirected to the sign-in page (HTML, status 200) with redir set to the file's path.
func (s *Server) servePrivateFile(w http.ResponseWriter, r *http.Request) {
	auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if auth != s.opts.BotToken {
		http.Redirect(w, r, "/signin?redir="+url.QueryEscape(r.URL.Path), http.StatusFound)
		return
	}
	_, id, _ := strings.Cut(r.PathValue("team_file"), "-")
	s.mu.Lock()
	f, ok := s.files[id]
	var data []byte
	if ok {
		data = f.Data
	}
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", f.Mimetype)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	_, _ = w.Write(data)
}

func (s *Server) serveSignin(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = io.WriteString(w, "<!DOCTYPE html><html><body>Sign in to Fake Workspace</body></html>")
}

// serveResponseURL records what the bot posts to a slash command's response_url.
func (s *Server) serveResponseURL(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	s.mu.Lock()
	s.responses = append(s.responses, ResponsePost{CommandID: r.PathValue("id"), Body: body})
	s.changedLocked()
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"ok":true}`)
}
