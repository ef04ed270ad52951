package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// noFetchingTools refuses a call that has the provider connect to a URL the agent names: Anthropic's
// MCP connector (mcp_servers, and its mcp_toolset tools) and web_fetch tool, and the Responses API's
// mcp tool. A sandbox with no network (or restricted egress) would otherwise reach any host through
// the model API, and send it whatever it read in the sandbox. Tools the agent runs itself, and web
// search, pass. Fields are read by their exact names, as the upstream reads them (Go's struct
// decoding matches names in any case, so {"type":"mcp","Type":"function"} would read as a function).
func noFetchingTools(req map[string]json.RawMessage) error {
	if raw, ok := req["mcp_servers"]; ok && string(raw) != "null" && string(raw) != "[]" {
		return errors.New("mcp_servers is not served: the model API would connect to hosts the sandbox cannot reach")
	}
	raw, ok := req["tools"]
	if !ok || string(raw) == "null" {
		return nil
	}
	var tools []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &tools); err != nil {
		return errors.New(`"tools" must be a list of objects`)
	}
	for _, tool := range tools {
		var typ string
		if t, ok := tool["type"]; ok && json.Unmarshal(t, &typ) != nil {
			return errors.New(`a tool's "type" must be a string`)
		}
		if typ == "mcp" || strings.HasPrefix(typ, "mcp_") || strings.HasPrefix(typ, "web_fetch") {
			return fmt.Errorf("the %s tool is not served: the model API would connect to hosts the sandbox cannot reach", typ)
		}
	}
	return nil
}
