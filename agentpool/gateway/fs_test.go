package gateway

import (
	"encoding/json"
	"os"
)

func mkdirTemp() (string, error) { return os.MkdirTemp("/tmp", "tbgw") }
func removeAll(dir string)       { _ = os.RemoveAll(dir) }

type jsonRaw = json.RawMessage

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
