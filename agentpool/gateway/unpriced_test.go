package gateway

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUnpricedModelCostsTheDearest: the model is the agent's to name, so a model the price table
// misses must not be free against the money budgets (a hostile agent would name one); it costs what
// the dearest entries of the table cost.
func TestUnpricedModelCostsTheDearest(t *testing.T) {
	e := newEnvPriced(t, Budget{UserDailyMicros: 100}, Prices{"cheap": {Input: 0.5, Output: 1}, "dear": {Input: 3, Output: 2}, "mid": {Input: 1, Output: 15}})
	gen := e.session(t, "web:c1")
	id := e.turn(t, "web:c1", "U1", "ev1")
	tok := Token(testSecret, "web:c1", gen)
	resp := e.do(t.Context(), t, apiCalls[1], tok, "hi", false) // model "m": not in the table
	body := readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	// 10 in at 3 (dear's input) + 5 out at 15 (mid's output).
	require.JSONEq(t, `{"input_tokens":10,"output_tokens":5,"cost_micros":105}`, usageOf(t, e.store, id))
	resp = e.do(t.Context(), t, apiCalls[1], tok, "hi", false)
	body = readAll(t, resp)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "the money budget is used up: %s", body)
}
