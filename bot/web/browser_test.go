package web

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// tinyPNG draws a small image with a shape in it, so a screenshot shows it was really decoded.
func tinyPNG(t *testing.T, w, h int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			c := color.RGBA{R: 47, G: 91, B: 211, A: 255}
			if (x-w/2)*(x-w/2)+(y-h/2)*(y-h/2) < (h/3)*(h/3) {
				c = color.RGBA{R: 255, G: 196, B: 0, A: 255}
			}
			img.Set(x, y, c)
		}
	}
	var buf bytes.Buffer
	require.NoError(t, png.Encode(&buf, img))
	return buf.Bytes()
}

// artifactDir is where screenshots go: THREADBOX_TEST_ARTIFACTS (kept), else the test's temp dir.
func artifactDir(t *testing.T) string {
	dir := os.Getenv("THREADBOX_TEST_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// js quotes a Go string as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestBrowserChat drives the page in headless Chromium against the real stack: a conversation, a
// command that writes a text artifact, one that writes a PNG shown inline, and the operations view.
func TestBrowserChat(t *testing.T) {
	const warning = "The local provider isolates nothing: commands run on this machine as you."
	s := newStack(t, stackOpts{admins: []string{"web:local"}, warning: warning})
	b := startBrowser(t)
	p := b.newPage(t, 1280, 900)
	p.navigate(s.ts.URL + "/")
	p.waitFor("the page to start", `document.body.dataset.ready === 'true'`, nil)

	var banner string
	p.eval(`document.querySelector('#warning').innerText`, &banner)
	require.Contains(t, banner, warning)

	p.eval(`document.querySelector('#new-conv').click()`, nil)
	var conv string
	p.waitFor("a live conversation", `location.hash.startsWith('#c=') &&
		document.querySelector('#stream-state').textContent.includes('live') && location.hash.slice(3)`, &conv)
	require.Regexp(t, idPattern, conv)

	sendJS := func(text string) string {
		return `(() => { document.querySelector('#text').value = ` + js(text) + `; document.querySelector('#send').click(); return true })()`
	}
	p.eval(sendJS("echo hello > output/display/hello.txt && echo done"), nil)
	var link struct{ Href, Download string }
	p.waitFor("done and hello.txt", `(() => {
		const done = [...document.querySelectorAll('.msg.bot .text')].some((e) => e.textContent.trim() === 'done');
		const a = [...document.querySelectorAll('a.artifact-link')].find((a) => a.textContent === 'hello.txt');
		return done && a && { href: a.getAttribute('href'), download: a.download };
	})()`, &link)
	require.Equal(t, "hello.txt", link.Download)
	require.True(t, strings.HasPrefix(link.Href, "/api/files/"), link.Href)
	var content string
	p.eval(`fetch(`+js(link.Href)+`).then((r) => r.text())`, &content)
	require.Equal(t, "hello\n", content)

	img := tinyPNG(t, 96, 64)
	p.eval(sendJS("printf '%s' '"+base64.StdEncoding.EncodeToString(img)+"' | base64 -d > output/display/chart.png && echo png-written"), nil)
	var size struct{ W, H int }
	p.waitFor("chart.png rendered", `(() => {
		const img = [...document.querySelectorAll('img.artifact-img')].find((i) => i.alt === 'chart.png');
		return img && img.complete && img.naturalWidth > 0 && { w: img.naturalWidth, h: img.naturalHeight };
	})()`, &size)
	require.Equal(t, 96, size.W, "the image actually loaded and decoded")
	require.Equal(t, 64, size.H)

	p.eval(sendJS("echo 'שלום — مرحبا'"), nil)
	p.waitFor("the right-to-left answer", `[...document.querySelectorAll('.msg.bot .text')].some((e) => e.textContent.includes('שלום — مرحبا'))`, nil)
	p.waitFor("the conversation in the list", `document.querySelector('#conversations li[data-id=`+js(conv)+`] .meta')?.textContent.startsWith('active')`, nil)

	dir := artifactDir(t)
	chat := filepath.Join(dir, "web-chat.png")
	require.NoError(t, os.WriteFile(chat, p.screenshot(), 0o644))
	t.Logf("screenshot of the chat: %s", chat)

	p.eval(`document.querySelector('#tab-ops').click()`, nil)
	p.waitFor("the session in the ops view", `(() => {
		const row = document.querySelector('#sessions tr[data-thread="web:' + `+js(conv)+` + '"]');
		return row && row.querySelector('.status').textContent === 'active';
	})()`, nil)
	p.eval(`document.querySelector('#sessions tr[data-thread="web:' + `+js(conv)+` + '"] button[data-cmd=pause]').click()`, nil)
	p.waitFor("the session paused", `document.querySelector('#sessions tr[data-thread="web:' + `+js(conv)+` + '"] .status')?.textContent === 'paused'`, nil)
	ops := filepath.Join(dir, "web-ops.png")
	require.NoError(t, os.WriteFile(ops, p.screenshot(), 0o644))
	t.Logf("screenshot of the operations view: %s", ops)

	var errs []string
	p.eval(`window.__errors`, &errs)
	require.Empty(t, errs, "no script errors and no CSP violations")
}
