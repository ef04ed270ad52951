package daytona

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona/internal/toolbox"
	"github.com/threadbox/threadbox/sandbox/internal/shellfs"
)

// File operations keep the Docker provider's rules: no path component below the work directory (or
// below /, outside it) may be a symlink, a read never follows one, and reads are bounded. The
// toolbox's own file calls resolve symlinks, so every operation first checks the path with a short
// script (walkScript) run by process/execute, as the sandbox's user; the bytes then travel through
// the toolbox's upload and download.

// walkScript is sourced by the file scripts: it walks from $top down to $d, refusing a symlink or a
// The file scripts and their parsing are shellfs's, shared with the other shell-only providers.
var writeScript = shellfs.WriteScript(ensureWorkDir)

// WriteFile implements sandbox.Provider: upload to a temporary file, then move it into place after
// the parent checks (missing parents are created).
func (p *Provider) WriteFile(ctx context.Context, h sandbox.Handle, name string, data []byte, mode fs.FileMode) error {
	st, err := decodeHandle(h)
	if err != nil {
		return err
	}
	abs, err := shellfs.Resolve(st.WorkDir, name)
	if err != nil {
		return err
	}
	if mode.Perm() == 0 {
		mode = 0o644
	}
	tb, err := p.toolbox(ctx, h, st)
	if err != nil {
		return err
	}
	tmp := "/tmp/.threadbox-upload-" + randomID()
	if err := p.upload(ctx, h, tb, tmp, strings.NewReader(string(data))); err != nil {
		return fmt.Errorf("write %s: %w", abs, err)
	}
	out, code, err := p.run(ctx, h, writeScript, tmp, abs, strconv.FormatUint(uint64(mode.Perm()), 8), shellfs.Top(st.WorkDir, abs), st.WorkDir)
	return shellfs.ScriptErr("daytona", "write", abs, out, code, err)
}

// ReadFile implements sandbox.Provider.
func (p *Provider) ReadFile(ctx context.Context, h sandbox.Handle, name string, max int64) ([]byte, error) {
	st, err := decodeHandle(h)
	if err != nil {
		return nil, err
	}
	abs, err := shellfs.Resolve(st.WorkDir, name)
	if err != nil {
		return nil, err
	}
	if max <= 0 {
		max = sandbox.DefaultMaxOutput
	}
	out, code, err := p.run(ctx, h, shellfs.ReadScript, abs, shellfs.Top(st.WorkDir, abs), strconv.FormatInt(max, 10))
	if err := shellfs.ScriptErr("daytona", "read", abs, out, code, err); err != nil {
		return nil, err
	}
	tb, err := p.toolbox(ctx, h, st)
	if err != nil {
		return nil, err
	}
	resp, err := tb.c.DownloadFile(ctx, &toolbox.DownloadFileParams{Path: abs})
	if err != nil {
		return nil, p.classify(ctx, h, fmt.Errorf("read %s: %w", abs, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		err := decode("download", resp, nil)
		if statusOf(err) == http.StatusNotFound {
			return nil, fmt.Errorf("read %s: %w: %w", abs, fs.ErrNotExist, stripNotFound(err))
		}
		return nil, p.classify(ctx, h, err)
	}
	// The file may have grown since the check: bound the read itself too.
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", abs, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("read %s: more than %d bytes: %w", abs, max, sandbox.ErrFileTooLarge)
	}
	return data, nil
}

// ListFiles implements sandbox.Provider.
func (p *Provider) ListFiles(ctx context.Context, h sandbox.Handle, dir string) ([]sandbox.FileInfo, error) {
	st, err := decodeHandle(h)
	if err != nil {
		return nil, err
	}
	abs, err := shellfs.Resolve(st.WorkDir, dir)
	if err != nil {
		return nil, err
	}
	out, code, err := p.run(ctx, h, shellfs.ListScript, abs, shellfs.Top(st.WorkDir, abs))
	if err := shellfs.ScriptErr("daytona", "list", abs, out, code, err); err != nil {
		return nil, err
	}
	return shellfs.ParseList("daytona", abs, out)
}

// upload streams r to dst with the toolbox's multipart upload.
func (p *Provider) upload(ctx context.Context, h sandbox.Handle, tb toolboxClient, dst string, r io.Reader) error {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		part, err := mw.CreateFormFile("file", path.Base(dst))
		if err == nil {
			_, err = io.Copy(part, r)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	err := p.tbCall(ctx, h, "upload", func(ctx context.Context) (*http.Response, error) {
		return tb.c.UploadFileWithBody(ctx, &toolbox.UploadFileParams{Path: dst}, mw.FormDataContentType(), pr)
	}, nil)
	pr.CloseWithError(errors.New("upload finished")) // unblocks the writer if the server stopped reading
	return err
}
