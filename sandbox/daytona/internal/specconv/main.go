// Command specconv converts Daytona's toolbox spec (Swagger 2.0, as Daytona publishes it) to
// OpenAPI 3, which both oapi-codegen and the fake's request validator need. `make generate` runs it
// before oapi-codegen; its output is committed so the fake can embed it.
//
//	go run ./sandbox/daytona/internal/specconv IN.swagger.json OUT.json
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: specconv IN.swagger.json OUT.json")
		os.Exit(2)
	}
	if err := convert(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "specconv:", err)
		os.Exit(1)
	}
}

func convert(in, out string) error {
	raw, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var doc2 openapi2.T
	if err := json.Unmarshal(raw, &doc2); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	doc3, err := openapi2conv.ToV3(&doc2)
	if err != nil {
		return fmt.Errorf("convert %s: %w", in, err)
	}
	// The toolbox has no fixed server: its base is {toolboxProxyUrl}/{sandboxId}, known per sandbox.
	doc3.Servers = nil
	b, err := json.MarshalIndent(doc3, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(b, '\n'), 0o644)
}
