package bot

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrTooBig is Spool's error for content past its cap.
var ErrTooBig = errors.New("over the size limit")

// Spool writes what fill produces into a temporary file (prefix names it), never into memory, and
// fails with ErrTooBig past max bytes, so an attachment larger than announced cannot fill the disk.
// The file comes back open at its start; closing it removes it.
func Spool(prefix string, max int64, fill func(w io.Writer) error) (io.ReadCloser, error) {
	f, err := os.CreateTemp("", prefix+"*")
	if err != nil {
		return nil, fmt.Errorf("spooling an attachment: %w", err)
	}
	sp := &SpoolFile{File: f}
	err = fill(&capWriter{f: f, max: max})
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		_ = sp.Close()
		return nil, err
	}
	return sp, nil
}

// capWriter writes up to max bytes and fails past them.
type capWriter struct {
	f   *os.File
	n   int64
	max int64
}

func (w *capWriter) Write(p []byte) (int, error) {
	if w.n+int64(len(p)) > w.max {
		return 0, ErrTooBig
	}
	n, err := w.f.Write(p)
	w.n += int64(n)
	return n, err
}

// SpoolFile is a spooled attachment; it removes itself when closed (a turn reads its files once).
type SpoolFile struct{ *os.File }

// Close closes and removes the file.
func (s *SpoolFile) Close() error {
	err := s.File.Close()
	_ = os.Remove(s.Name())
	return err
}
