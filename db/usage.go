package db

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// usageCounts are the keys of a turn's usage that TurnAddUsage adds to and the budgets sum.
var usageCounts = []string{"input_tokens", "output_tokens", "cost_micros"}

// checkUsageCall refuses a TurnAddUsage count outside [0, MaxUsagePerCall]: a negative one would
// lower a budget's sum, and a huge one overflowed PostgreSQL's bigint (a raw driver error) while
// SQLite went to floating point and lost precision, so the engines' sums differed.
func checkUsageCall(input, output, cost int64) error {
	for i, v := range []int64{input, output, cost} {
		if v < 0 || v > MaxUsagePerCall {
			return invalidf("usage %s %d is outside [0, %d]", usageCounts[i], v, MaxUsagePerCall)
		}
	}
	return nil
}

// checkUsageJSON refuses a finished turn's usage that is not a JSON object (or null): the store adds
// to its counts (usageCounts) by key, which PostgreSQL and SQLite do differently to anything else.
func checkUsageJSON(usage json.RawMessage) error {
	if usage == nil || isJSONNull(usage) {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(usage, &fields); err != nil {
		return invalidf("turn usage is not a JSON object")
	}
	return nil
}

// cleanUsageJSON drops from a finished turn's usage (a JSON object, checkUsageJSON) the counts
// (usageCounts) that are not whole numbers in [0, MaxUsagePerCall]; the other keys are the
// runtime's own and are kept as they are. PostgreSQL casts each count to bigint when it sums, so a
// fractional, string or huge one failed every later sum that read the turn (the gateway's budget
// check for the whole deployment) while SQLite summed it as it was, and a negative one lowered the
// budgets. The counts come from the agent's own report, so a bad one must not cost the turn its
// answer: it is dropped, not refused. JSON null is no usage (nil), which keeps what was counted.
func cleanUsageJSON(usage json.RawMessage) json.RawMessage {
	if usage == nil || isJSONNull(usage) {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(usage, &fields); err != nil {
		return usage // checkUsageJSON refused it already
	}
	dropped := false
	for _, k := range usageCounts {
		raw, ok := fields[k]
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(string(raw), 10, 64); err != nil || n < 0 || n > MaxUsagePerCall {
			delete(fields, k)
			dropped = true
		}
	}
	if !dropped {
		return usage
	}
	out, err := json.Marshal(fields)
	if err != nil {
		return usage
	}
	return out
}

func isJSONNull(b json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(b), []byte("null")) }
