package bot

import (
	"strings"
	"unicode/utf8"
)

const fence = "```"

// Split cuts an answer into chunks of at most max characters (runes), on paragraph or line boundaries
// where possible, never inside a rune. A code block that spans chunks is closed at the end of one and
// reopened (with its language) at the start of the next, so every chunk renders on its own.
func Split(text string, max int) []string {
	if max < 16 {
		max = 16 // room for a fence pair around some content
	}
	if utf8.RuneCountInString(text) <= max {
		return []string{text}
	}
	var (
		chunks []string
		cur    strings.Builder
		curN   int
		open   string // the opening fence line of a block spanning the cut, "" if none
		inCode bool
		lang   string
	)
	flush := func() {
		if curN == 0 {
			return
		}
		s := cur.String()
		if inCode {
			s = strings.TrimRight(s, "\n") + "\n" + fence
		}
		chunks = append(chunks, strings.TrimRight(s, "\n"))
		cur.Reset()
		curN = 0
		if inCode {
			open = fence + lang + "\n"
			cur.WriteString(open)
			curN = utf8.RuneCountInString(open)
		}
	}
	// room keeps space for a closing fence when inside a code block.
	room := func() int {
		if inCode {
			return max - len(fence) - 1
		}
		return max
	}
	for _, line := range strings.SplitAfter(text, "\n") {
		n := utf8.RuneCountInString(line)
		if curN+n > room() && curN > utf8.RuneCountInString(open) {
			flush()
		}
		// A single line longer than a chunk is hard-wrapped at rune boundaries.
		for n > room()-curN {
			take := room() - curN
			if take <= 0 {
				flush()
				continue
			}
			r := []rune(line)
			cur.WriteString(string(r[:take]))
			curN += take
			line = string(r[take:])
			n -= take
			flush()
		}
		cur.WriteString(line)
		curN += n
		if t := strings.TrimSpace(line); strings.HasPrefix(t, fence) {
			if inCode {
				inCode, lang = false, ""
			} else {
				inCode, lang = true, strings.TrimPrefix(t, fence)
			}
			open = ""
		}
	}
	if curN > 0 {
		s := strings.TrimRight(cur.String(), "\n")
		if strings.TrimSpace(s) != strings.TrimSpace(open) {
			chunks = append(chunks, s)
		}
	}
	return chunks
}

// Layout decides how an answer is posted: as chunks, or, when it would take more than the platform's
// MaxChunks messages, as a short head plus the full text as a file.
type Layout struct {
	Chunks []string
	// File, when set, holds the full answer to upload as answer.md.
	File []byte
}

// LayoutAnswer applies Split and the chunk cap.
func LayoutAnswer(text string, lim Limits) Layout {
	if strings.TrimSpace(text) == "" {
		text = "(no answer)"
	}
	max := lim.MaxMessage
	if max <= 0 {
		max = 3500
	}
	chunks := Split(text, max)
	if lim.MaxChunks <= 0 || len(chunks) <= lim.MaxChunks {
		return Layout{Chunks: chunks}
	}
	note := "\n\n…the full answer is attached as answer.md."
	head := Split(text, max-utf8.RuneCountInString(note))[0]
	return Layout{Chunks: []string{head + note}, File: []byte(text)}
}
