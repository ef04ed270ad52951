package slack

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot/slack/slackfake"
)

func signedHeader(secret string, ts time.Time, body []byte) http.Header {
	h := http.Header{}
	h.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts.Unix(), 10))
	h.Set("X-Slack-Signature", slackfake.Sign(secret, ts.Unix(), body))
	return h
}

// TestFakeSignsLikeSlack checks the fake's signature against slack-go's own verifier, so that what
// the adapter accepts from the fake is what it would accept from Slack.
func TestFakeSignsLikeSlack(t *testing.T) {
	body := []byte(`{"type":"event_callback","event_id":"Ev1"}`)
	h := signedHeader("s3cret", time.Now(), body)
	sv, err := slack.NewSecretsVerifier(h, "s3cret")
	require.NoError(t, err)
	_, _ = sv.Write(body)
	require.NoError(t, sv.Ensure(), "slack-go accepts the fake's signature")
	require.NoError(t, verifySignature(h, body, "s3cret", time.Now()), "and so do we")
}

func TestVerifySignature(t *testing.T) {
	now := time.Unix(1_750_000_000, 0)
	body := []byte(`{"type":"event_callback"}`)
	good := signedHeader("secret", now, body)
	with := func(mod func(h http.Header)) http.Header {
		h := good.Clone()
		mod(h)
		return h
	}
	tests := []struct {
		name   string
		h      http.Header
		body   []byte
		secret string
		now    time.Time
		want   error
	}{
		{name: "valid", h: good, body: body, secret: "secret", now: now},
		{name: "4m59s old is inside the window", h: good, body: body, secret: "secret", now: now.Add(4*time.Minute + 59*time.Second)},
		{name: "5m1s old is stale", h: good, body: body, secret: "secret", now: now.Add(5*time.Minute + time.Second), want: errStale},
		{name: "5m1s in the future is stale", h: good, body: body, secret: "secret", now: now.Add(-5*time.Minute - time.Second), want: errStale},
		{name: "wrong secret", h: good, body: body, secret: "other", now: now, want: errBadSignature},
		{name: "tampered body", h: good, body: []byte(`{"type":"event_callbacK"}`), secret: "secret", now: now, want: errBadSignature},
		{name: "no signature", h: with(func(h http.Header) { h.Del("X-Slack-Signature") }), body: body, secret: "secret", now: now, want: errMissingHeader},
		{name: "no timestamp", h: with(func(h http.Header) { h.Del("X-Slack-Request-Timestamp") }), body: body, secret: "secret", now: now, want: errMissingHeader},
		{name: "timestamp not a number", h: with(func(h http.Header) { h.Set("X-Slack-Request-Timestamp", "soon") }), body: body, secret: "secret", now: now, want: errBadTimestamp},
		{name: "signed timestamp differs from header", h: with(func(h http.Header) { h.Set("X-Slack-Request-Timestamp", strconv.FormatInt(now.Unix()+1, 10)) }), body: body, secret: "secret", now: now, want: errBadSignature},
		{name: "no v0 prefix", h: with(func(h http.Header) {
			h.Set("X-Slack-Signature", strings.TrimPrefix(good.Get("X-Slack-Signature"), "v0="))
		}), body: body, secret: "secret", now: now, want: errBadSignature},
		{name: "v1 scheme", h: with(func(h http.Header) {
			h.Set("X-Slack-Signature", "v1="+strings.TrimPrefix(good.Get("X-Slack-Signature"), "v0="))
		}), body: body, secret: "secret", now: now, want: errBadSignature},
		{name: "not hex", h: with(func(h http.Header) { h.Set("X-Slack-Signature", "v0=zz") }), body: body, secret: "secret", now: now, want: errBadSignature},
		{name: "short", h: with(func(h http.Header) { h.Set("X-Slack-Signature", "v0=abcd") }), body: body, secret: "secret", now: now, want: errBadSignature},
		{name: "no secret configured", h: good, body: body, secret: "", now: now, want: errNoSecret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := verifySignature(tt.h, tt.body, tt.secret, tt.now)
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.want)
		})
	}
}

// TestUnsignedRequestsAre401AndDoNothing covers the acceptance rule at the HTTP edge: a bad or
// missing signature, or a stale timestamp, gets 401 and reaches neither the handler nor the dedupe.
func TestUnsignedRequestsAre401AndDoNothing(t *testing.T) {
	h := newStubHandler()
	hs := newHarness(t, nil, h)
	ev := hs.fake.Mention("C1", "U1", "echo hi")
	for name, opts := range map[string][]slackfake.DeliverOption{
		"forged":       {slackfake.SignWith("not-the-secret")},
		"no signature": {slackfake.Signature("")},
		"garbage":      {slackfake.Signature("v0=deadbeef")},
		"no timestamp": {slackfake.NoTimestamp()},
		"stale":        {slackfake.SignedAt(time.Now().Add(-5*time.Minute - 10*time.Second))},
	} {
		res, err := hs.fake.Deliver(t.Context(), hs.events, ev, opts...)
		require.NoError(t, err)
		require.Equal(t, http.StatusUnauthorized, res.Status, name)
	}
	res, err := hs.fake.SlashCommand(t.Context(), hs.commands, slackfake.SlashCommand{Text: "sessions", UserID: "U1"}, slackfake.SignWith("nope"))
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, res.Status, "slash commands are verified too")
	require.Empty(t, h.messages())

	// The genuine event still goes through afterwards: the rejected ones marked nothing as seen.
	hs.deliver(t, ev)
	require.Equal(t, "echo hi", h.next(t).Text)
}

func TestRequestShape(t *testing.T) {
	hs := newHarness(t, nil, newStubHandler())
	resp, err := http.Get(hs.events)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	big := bytes.Repeat([]byte("x"), maxBody+10)
	res, err := hs.fake.PostSigned(t.Context(), hs.events, "application/json", big)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, res.Status)
}
