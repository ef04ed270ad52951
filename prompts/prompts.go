// Package prompts holds the text Threadbox sends to agents besides the user's own words: the system
// prompt, and the replay of a thread's history into a fresh agent session. They are Markdown
// templates embedded in the binary, so that wording changes are reviewed as text and covered by
// golden tests (testdata/*.golden; go test ./prompts -update rewrites them).
package prompts

import (
	"embed"
	"fmt"
	"regexp"
	"strings"
	"text/template"
)

//go:embed *.md
var files embed.FS

// templates are parsed once; a template that does not parse is a build mistake caught by the tests.
var templates = template.Must(template.New("").Option("missingkey=error").ParseFS(files, "*.md"))

// Defaults for SystemData's empty fields.
const (
	DefaultWorkDir   = "/workspace"
	DefaultMaxFileMB = 10
)

// SystemData fills the system prompt.
type SystemData struct {
	// WorkDir is the agent's working directory (DefaultWorkDir when empty).
	WorkDir string
	// MaxFileMB is the largest file the chat platform accepts (DefaultMaxFileMB when zero).
	MaxFileMB int
}

// System renders the system prompt: the working directory, output/display/ for files meant for the
// user, conciseness, and no follow-up questions unless blocked.
func System(d SystemData) string {
	if d.WorkDir == "" {
		d.WorkDir = DefaultWorkDir
	}
	d.WorkDir = strings.TrimSuffix(d.WorkDir, "/")
	if d.MaxFileMB <= 0 {
		d.MaxFileMB = DefaultMaxFileMB
	}
	return render("system.md", d)
}

// Turn is one earlier exchange of the thread.
type Turn struct {
	User      string
	Assistant string
	// Failed, when set, says why the turn did not finish (then Assistant is not shown).
	Failed string
}

// ReplayData fills the replay.
type ReplayData struct {
	// Note is the hand-off note the last turn left.
	Note  string
	Turns []Turn
}

// Replay renders a thread's history for an agent that starts without it (a recreated sandbox or a
// replaced agent session). Turns are oldest first; capping them is the caller's business. Empty data
// renders as "".
func Replay(d ReplayData) string {
	if strings.TrimSpace(d.Note) == "" && len(d.Turns) == 0 {
		return ""
	}
	return render("replay.md", d)
}

// Message is what a runtime sends as the user's turn: text alone, or, when history must be replayed,
// the history followed by the new message, clearly apart so the agent answers only the latter.
func Message(history, text string) string {
	if strings.TrimSpace(history) == "" {
		return text
	}
	return render("message.md", struct{ History, Text string }{defuseFraming(strings.TrimSpace(history)), text})
}

// framingTag matches the start of message.md's history tags, in the spellings a model would still
// read as one (any case, spaces around the slash).
var framingTag = regexp.MustCompile(`(?i)<(\s*/?\s*conversation-history)`)

// defuseFraming escapes the history tags in the history's text. That text is other people's words
// (earlier chat messages, another integration's report, old prompts and answers), and a closing tag
// in it would end the history early: what followed, "New message: …", would read as the user's.
func defuseFraming(history string) string {
	return framingTag.ReplaceAllString(history, "&lt;$1")
}

func render(name string, data any) string {
	var b strings.Builder
	if err := templates.ExecuteTemplate(&b, name, data); err != nil {
		// The data types are ours and the templates are tested: this is a programming error.
		panic(fmt.Sprintf("prompts: %s: %v", name, err))
	}
	return strings.TrimRight(b.String(), "\n")
}

// ChatMessage is one message of a chat thread from before the bot was asked in it.
type ChatMessage struct {
	Author string
	// Bot marks another integration's post (an alert, a CI report).
	Bot bool
	// At is when it was written, as the template shows it ("" to leave it out).
	At   string
	Text string
}

// ChatData fills the chat thread's context.
type ChatData struct {
	// Messages are oldest first; capping them is the caller's business.
	Messages []ChatMessage
	// Omitted is how many earlier messages the caps left out.
	Omitted int
}

// Chat renders what a chat thread said before the bot was first asked in it, for the first prompt.
// No messages render as "".
func Chat(d ChatData) string {
	if len(d.Messages) == 0 {
		return ""
	}
	return render("chat.md", d)
}
