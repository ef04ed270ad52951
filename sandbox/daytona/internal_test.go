package daytona

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDemux: the logs stream's markers switch streams, also when a message boundary cuts one.
func TestDemux(t *testing.T) {
	const o, e = "\x01\x01\x01", "\x02\x02\x02"
	for _, tc := range []struct {
		name           string
		msgs           []string
		stdout, stderr string
	}{
		{"stdout only", []string{o + "hello"}, "hello", ""},
		{"both", []string{o + "out1" + e + "err1" + o + "out2"}, "out1out2", "err1"},
		{"marker cut after one byte", []string{o + "a\x02", "\x02\x02b"}, "a", "b"},
		{"marker cut after two bytes", []string{o + "a\x02\x02", "\x02b"}, "a", "b"},
		{"marker over three messages", []string{"\x01", "\x01", "\x01x"}, "x", ""},
		{"lone control bytes are data", []string{o + "a\x01b\x02\x02c"}, "a\x01b\x02\x02c", ""},
		{"trailing partial marker is data", []string{o + "a\x01\x01"}, "a\x01\x01", ""},
		{"no marker yet: stdout", []string{"plain"}, "plain", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb strings.Builder
			d := demux{cur: &out, out: &out, err: &errb}
			for _, m := range tc.msgs {
				d.write([]byte(m))
			}
			d.flush()
			require.Equal(t, tc.stdout, out.String())
			require.Equal(t, tc.stderr, errb.String())
		})
	}
}

// TestParsePreview: the token may come beside the link or in its query (tkn); the link is kept
// without query, so request paths can be appended.
func TestParsePreview(t *testing.T) {
	for _, tc := range []struct {
		name, raw, token   string
		wantURL, wantToken string
		wantErr            bool
	}{
		{name: "token beside", raw: "https://8080-abc.proxy.daytona.work", token: "t1",
			wantURL: "https://8080-abc.proxy.daytona.work", wantToken: "t1"},
		{name: "token in query", raw: "https://8080-abc.proxy.daytona.work/?tkn=t2",
			wantURL: "https://8080-abc.proxy.daytona.work", wantToken: "t2"},
		{name: "beside wins", raw: "https://h/?tkn=q", token: "b", wantURL: "https://h", wantToken: "b"},
		{name: "path kept", raw: "http://127.0.0.1:1/preview/8080-abc/", token: "t",
			wantURL: "http://127.0.0.1:1/preview/8080-abc", wantToken: "t"},
		{name: "relative", raw: "/preview", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := parsePreview(tc.raw, tc.token)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, previewLink{url: tc.wantURL, token: tc.wantToken}, l)
		})
	}
}
