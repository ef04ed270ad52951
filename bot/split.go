package bot

import (
	"strings"
	"unicode/utf8"
)

const fence = "```"

// MinChunk is the smallest chunk length Split honours: a limit below it is raised to it. It leaves
// room for a reopened fence, a closing fence and some content ("```\n" + 8 runes + "\n```").
const MinChunk = 16

// DefaultMaxMessage is LayoutAnswer's chunk length when the platform sets none (Slack's practical
// limit for one readable message).
const DefaultMaxMessage = 3500

// maxLang bounds the language tag a reopened fence repeats. A longer info string ("```" followed by
// a 3,000-character line) is not a language, and repeating it would not leave room for content.
const maxLang = 32

// closeFence ends a chunk cut inside a code block.
const closeFence = "\n" + fence

// Split cuts an answer into chunks of at most max runes (max below MinChunk counts as MinChunk),
// added fences included. It cuts between lines where it can, else inside a long line (after a space
// when one is in the line's second half), never inside a rune of valid UTF-8.
//
// Code blocks are tracked line by line: a line whose trimmed text starts with ``` opens a block or
// closes the open one. A block that spans a cut is closed at the end of one chunk and reopened (with
// its language, when short) at the start of the next, and a block the text never closes is closed
// by the last chunk, so every chunk holds an even number of fence lines and renders on its own.
//
// Nothing else is added or lost: removing the added fences from the chunks gives pieces of the text
// that, in order, make up the whole of it except for the newlines at the cuts (and at its start and
// end). Empty or newline-only text gives no chunk.
//
// Every step of the loop consumes input or emits a chunk holding some, so Split ends on any input,
// in time linear in the text's length.
func Split(text string, max int) []string {
	cs := splitChunks(text, max)
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.String()
	}
	return out
}

// chunk is one piece of Split's output: body is text taken verbatim from the answer; open and
// closed are the fences added around it.
type chunk struct {
	open   string // "" or a reopened fence line with its newline
	body   string
	closed bool // closeFence was added
}

func (c chunk) String() string {
	if c.closed {
		return c.open + c.body + closeFence
	}
	return c.open + c.body
}

// isFence reports whether a line opens or closes a code block.
func isFence(line string) bool { return strings.HasPrefix(strings.TrimSpace(line), fence) }

// splitter holds Split's state between lines.
type splitter struct {
	max    int
	out    []chunk
	open   string // the current chunk's reopened fence
	openN  int
	body   strings.Builder
	bodyN  int  // runes in body
	inCode bool // after the last line taken
	reopen string
}

func splitChunks(text string, max int) []chunk {
	s := &splitter{max: max}
	if s.max < MinChunk {
		s.max = MinChunk
	}
	for rest := text; ; {
		line, more, found := strings.Cut(rest, "\n")
		s.line(line)
		if !found {
			break
		}
		rest = more
	}
	s.flush()
	return s.out
}

// line takes one line of the text (without its newline).
func (s *splitter) line(l string) {
	n := utf8.RuneCountInString(l)
	for {
		if s.bodyN == 0 && l == "" {
			return // newlines at a chunk's start are dropped
		}
		fenced := isFence(l)
		after := s.inCode != fenced
		sep := 0
		if s.bodyN > 0 {
			sep = 1
		}
		if s.openN+s.bodyN+sep+n+s.closeCost(after) <= s.max {
			if sep == 1 {
				s.body.WriteByte('\n')
			}
			s.body.WriteString(l)
			s.bodyN += sep + n
			s.toggle(l, fenced)
			return
		}
		if s.bodyN > 0 {
			s.flush() // the line starts the next chunk
			continue
		}
		// The line alone is too long: take what fits, keeping room for a closing fence whatever the
		// piece turns out to be, and carry the rest to the next chunk with no newline between.
		// The room is at least 1: flush keeps open + closeFence within half of max.
		piece, pieceN := cutRunes(l, s.max-s.openN-len(closeFence))
		fenced = isFence(piece)
		s.body.WriteString(piece)
		s.bodyN = pieceN
		s.toggle(piece, fenced)
		s.flush()
		l, n = l[len(piece):], n-pieceN
	}
}

// closeCost is the room a closing fence needs if the chunk ends in a code block.
func (s *splitter) closeCost(inCode bool) int {
	if inCode {
		return len(closeFence)
	}
	return 0
}

// toggle follows the code block state over a line just taken.
func (s *splitter) toggle(l string, fenced bool) {
	if !fenced {
		return
	}
	s.inCode = !s.inCode
	if !s.inCode {
		s.reopen = ""
		return
	}
	s.reopen = fence + "\n"
	lang := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), fence))
	if lang != "" && utf8.RuneCountInString(lang) <= maxLang && !strings.ContainsAny(lang, " \t`") &&
		len(fence)+utf8.RuneCountInString(lang)+1+len(closeFence) <= s.max/2 {
		s.reopen = fence + lang + "\n"
	}
}

// flush emits the current chunk, if it holds anything, and starts the next one, reopened in a code
// block when the cut is inside one.
func (s *splitter) flush() {
	body := strings.TrimRight(s.body.String(), "\n")
	if body != "" {
		s.out = append(s.out, chunk{open: s.open, body: body, closed: s.inCode})
	}
	s.body.Reset()
	s.bodyN = 0
	s.open, s.openN = "", 0
	if s.inCode {
		s.open = s.reopen
		s.openN = utf8.RuneCountInString(s.open)
	}
}

// cutRunes returns the first piece of l of at most room runes (at least one), cut after its last
// space when that is in the piece's second half, and its length in runes.
func cutRunes(l string, room int) (string, int) {
	room = max(room, 1)
	end, n := 0, 0
	spaceEnd, spaceN := 0, 0
	for end < len(l) && n < room {
		r, w := utf8.DecodeRuneInString(l[end:])
		end += w
		n++
		if r == ' ' {
			spaceEnd, spaceN = end, n
		}
	}
	if end < len(l) && spaceN >= room/2 && spaceN > 0 {
		return l[:spaceEnd], spaceN
	}
	return l[:end], n
}

// Layout decides how an answer is posted: as chunks, or, when it would take more than the platform's
// MaxChunks messages, as a short head plus the full text as a file.
type Layout struct {
	Chunks []string
	// File, when set, holds the full answer to upload as answer.md.
	File []byte
}

// attachedNote ends the head of an answer sent as a file.
const attachedNote = "\n\n…the full answer is attached as answer.md."

// LayoutAnswer applies Split and the chunk cap. It always gives at least one chunk, each within
// Split's limit (MaxMessage, DefaultMaxMessage when unset, at least MinChunk) with balanced fences.
func LayoutAnswer(text string, lim Limits) Layout {
	if strings.TrimSpace(text) == "" {
		text = "(no answer)"
	}
	limit := messageLimit(lim)
	chunks := Split(text, limit)
	if lim.MaxChunks <= 0 || len(chunks) <= lim.MaxChunks {
		return Layout{Chunks: chunks}
	}
	headMax := limit - utf8.RuneCountInString(attachedNote)
	if headMax < MinChunk {
		// No room for the note next to some text: the head alone, the file says the rest.
		return Layout{Chunks: chunks[:1], File: []byte(text)}
	}
	return Layout{Chunks: []string{Split(text, headMax)[0] + attachedNote}, File: []byte(text)}
}

// messageLimit is the chunk length for the platform's messages: MaxMessage, DefaultMaxMessage when
// unset, at least MinChunk.
func messageLimit(lim Limits) int {
	if lim.MaxMessage <= 0 {
		return DefaultMaxMessage
	}
	return max(lim.MaxMessage, MinChunk)
}
