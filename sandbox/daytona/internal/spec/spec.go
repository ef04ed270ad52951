// Package spec holds Daytona's API and toolbox specs: api.json and toolbox.swagger.json as Daytona
// publishes them, and toolbox.json, the toolbox spec converted to OpenAPI 3 by specconv (make
// generate). The clients are generated from them, and daytonafake validates every request with them.
package spec

import _ "embed"

// API is the Daytona API spec (OpenAPI 3.0).
//
//go:embed api.json
var API []byte

// Toolbox is the toolbox (in-sandbox daemon) spec, converted to OpenAPI 3.0.
//
//go:embed toolbox.json
var Toolbox []byte
