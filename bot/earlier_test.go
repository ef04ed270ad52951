package bot

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
)

func TestCapEarlier(t *testing.T) {
	msg := func(text string) EarlierMessage { return EarlierMessage{Author: "a", Text: text} }
	texts := func(em EarlierMessages) []string {
		var out []string
		for _, m := range em.Messages {
			out = append(out, m.Text)
		}
		return out
	}
	long := strings.Repeat("x", 1000)
	tests := []struct {
		name        string
		msgs        []EarlierMessage
		keepFirst   bool
		seen        int
		lim         EarlierLimits
		want        []string
		wantOmitted int
	}{
		{"all fit", []EarlierMessage{msg("root"), msg("a"), msg("b")}, true, 3, EarlierLimits{Messages: 20, Chars: 8000}, []string{"root", "a", "b"}, 0},
		{"count cap keeps the root and the newest", []EarlierMessage{msg("root"), msg("a"), msg("b"), msg("c")}, true, 4, EarlierLimits{Messages: 3, Chars: 8000}, []string{"root", "b", "c"}, 1},
		{"without the root, the newest", []EarlierMessage{msg("a"), msg("b"), msg("c")}, false, 3, EarlierLimits{Messages: 2, Chars: 8000}, []string{"b", "c"}, 1},
		{"messages the adapter did not keep count as omitted", []EarlierMessage{msg("root"), msg("z")}, true, 50, EarlierLimits{Messages: 20, Chars: 8000}, []string{"root", "z"}, 48},
		{"char cap stops at a message that no longer fits usefully", []EarlierMessage{msg("root"), msg(long), msg(strings.Repeat("y", 250))}, true, 3, EarlierLimits{Messages: 20, Chars: 400}, []string{"root", strings.Repeat("y", 250)}, 1},
		{"a long message is cut to what is left", []EarlierMessage{msg("root"), msg(long)}, true, 2, EarlierLimits{Messages: 20, Chars: 504}, []string{"root", strings.Repeat("x", 499) + "…"}, 0},
		{"a long root gets at most half", []EarlierMessage{msg(long), msg("a")}, true, 2, EarlierLimits{Messages: 20, Chars: 600}, []string{strings.Repeat("x", 299) + "…", "a"}, 0},
		{"off", []EarlierMessage{msg("root")}, true, 1, EarlierLimits{}, nil, 1},
		{"nothing", nil, true, 0, EarlierLimits{Messages: 20, Chars: 8000}, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := CapEarlier(tc.msgs, tc.keepFirst, tc.seen, tc.lim)
			require.Equal(t, tc.want, texts(got))
			require.Equal(t, tc.wantOmitted, got.Omitted)
			chars := 0
			for _, m := range got.Messages {
				chars += len([]rune(m.Text))
			}
			require.LessOrEqual(t, chars, max(tc.lim.Chars, 0), "within the character cap")
		})
	}
}

func TestReadEarlierRef(t *testing.T) {
	errBad := errors.New("bad reference")
	errRead := errors.New("history unavailable")
	parse := func(s string) (string, error) {
		if s == "" {
			return "", errBad
		}
		return strings.ToUpper(s), nil
	}
	read := func(_ context.Context, r string) (EarlierMessages, error) {
		if r == "FAIL" {
			return EarlierMessages{}, errRead
		}
		return EarlierMessages{Messages: []EarlierMessage{{Text: r}}, Omitted: 1}, nil
	}
	on := EarlierLimits{Messages: 20, Chars: 8000}
	tests := []struct {
		name    string
		ref     string
		lim     EarlierLimits
		want    EarlierMessages
		wantErr error
	}{
		{name: "reads the parsed reference", ref: "c/t/1", lim: on,
			want: EarlierMessages{Messages: []EarlierMessage{{Text: "C/T/1"}}, Omitted: 1}},
		{name: "a bad reference is an error even with reading off", ref: "", lim: EarlierLimits{}, wantErr: errBad},
		{name: "no messages cap: nothing read", ref: "c/t/1", lim: EarlierLimits{Chars: 8000}},
		{name: "no characters cap: nothing read", ref: "c/t/1", lim: EarlierLimits{Messages: 20}},
		{name: "a failed read is returned", ref: "fail", lim: on, wantErr: errRead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadEarlierRef(t.Context(), tt.ref, tt.lim, parse, read)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestWithAttached(t *testing.T) {
	tests := []struct {
		name, text string
		files      []string
		want       string
	}{
		{name: "no files: text as is", text: " hi ", want: " hi "},
		{name: "one file", text: "see this", files: []string{"log.txt"}, want: "see this\n[attached: log.txt]"},
		{name: "several files", text: "both", files: []string{"a.png", "b.png"}, want: "both\n[attached: a.png, b.png]"},
		{name: "files alone", text: "", files: []string{"a.png"}, want: "[attached: a.png]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, WithAttached(tt.text, tt.files))
		})
	}
}

func TestContextNote(t *testing.T) {
	tests := []struct {
		note agentpool.ContextNote
		want string
	}{
		{agentpool.ContextNote{}, ""},
		{agentpool.ContextNote{Read: 1}, "(I read the 1 earlier message of this thread before your message.)"},
		{agentpool.ContextNote{Read: 5}, "(I read the 5 earlier messages of this thread before your message.)"},
		{agentpool.ContextNote{Read: 20, Omitted: 7}, "(I read the 20 earlier messages of this thread before your message; 7 older or longer ones did not fit.)"},
		{agentpool.ContextNote{Failed: true}, "(I could not read the earlier messages of this thread, so I worked from your message alone.)"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, contextNote(tc.note))
	}
}

// earlierPlatform restores replies and reads earlier messages by reference, recording the refs.
type earlierPlatform struct{ refs []string }

func (p *earlierPlatform) Name() string                             { return "test" }
func (p *earlierPlatform) Restore(json.RawMessage) (Replier, error) { return newChatReplier(), nil }
func (p *earlierPlatform) OpenFile(context.Context, string) (io.ReadCloser, error) {
	return nil, io.EOF
}
func (p *earlierPlatform) ReadEarlier(_ context.Context, ref string) (EarlierMessages, error) {
	p.refs = append(p.refs, ref)
	return EarlierMessages{Messages: []EarlierMessage{{Author: "ada", Text: "from " + ref}}, Omitted: 2}, nil
}

// TestEarlierSurvivesATakeover: the reference is recorded with the turn, and a process that restores
// the turn reads the earlier messages through its adapter.
func TestEarlierSurvivesATakeover(t *testing.T) {
	msg := Message{Thread: ThreadKey{Platform: "test", Thread: "t"}, Text: "fix it",
		Earlier: &Earlier{Ref: "C1/1.000100/1.000200", Read: func(context.Context) (EarlierMessages, error) {
			t.Fatal("the original process's reader must not be used after a takeover")
			return EarlierMessages{}, nil
		}}}
	dl, err := encodeDelivery(msg)
	require.NoError(t, err)

	h := NewHandler(HandlerConfig{}, nil, nil, nil, nil)
	plat := &earlierPlatform{}
	h.RegisterPlatform(plat)
	req, err := h.Restore(t.Context(), db.Turn{ThreadKey: "test:t", Prompt: "fix it", Delivery: dl})
	require.NoError(t, err)
	require.NotNil(t, req.Context)
	cc, err := req.Context(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{"C1/1.000100/1.000200"}, plat.refs)
	require.Equal(t, agentpool.ChatContext{Omitted: 2, Messages: []agentpool.ChatMessage{{Author: "ada", Text: "from C1/1.000100/1.000200"}}}, cc)

	plain, err := encodeDelivery(Message{Thread: msg.Thread, Text: "no context"})
	require.NoError(t, err)
	req, err = h.Restore(t.Context(), db.Turn{ThreadKey: "test:t", Prompt: "no context", Delivery: plain})
	require.NoError(t, err)
	require.Nil(t, req.Context, "a message without earlier messages reads none")
}
