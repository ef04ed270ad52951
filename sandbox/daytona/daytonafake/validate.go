package daytonafake

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/threadbox/threadbox/sandbox/daytona/internal/spec"
)

// validator matches requests against the API spec (paths below /api) and the toolbox spec (paths
// below /toolbox/{sandboxId}).
type validator struct {
	api, toolbox routers.Router
}

func newValidator() (*validator, error) {
	api, err := loadRouter(spec.API)
	if err != nil {
		return nil, fmt.Errorf("api spec: %w", err)
	}
	tb, err := loadRouter(spec.Toolbox)
	if err != nil {
		return nil, fmt.Errorf("toolbox spec: %w", err)
	}
	return &validator{api: api, toolbox: tb}, nil
}

func loadRouter(raw []byte) (routers.Router, error) {
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		return nil, err
	}
	// Requests are matched on their path below the fake's prefix, whatever host they went to.
	doc.Servers = openapi3.Servers{{URL: "/"}}
	// Not doc.Validate: Daytona's API spec has two spellings of one path parameter
	// (/sandbox/{sandboxId}/secrets and /sandbox/{sandboxIdOrName}/secrets), which it refuses.
	return gorillamux.NewRouter(doc)
}

// validate checks r against the spec of its kind and returns its operationId. r's body is read and
// replaced, so handlers still see it.
func (v *validator) validate(r *http.Request, kind string) (string, error) {
	router, rel := v.api, strings.TrimPrefix(r.URL.Path, "/api")
	if kind == "toolbox" {
		// /toolbox/{sandboxId}/rest: the sandbox ID is the base URL's, not the spec's.
		rest := strings.TrimPrefix(r.URL.Path, "/toolbox/")
		_, after, _ := strings.Cut(rest, "/")
		router, rel = v.toolbox, "/"+after
	}
	probe := r.Clone(r.Context())
	probe.URL.Path, probe.URL.RawPath = rel, ""
	probe.URL.Host, probe.URL.Scheme, probe.Host = "", "", ""
	probe.Body = r.Body
	route, params, err := router.FindRoute(probe)
	if err != nil {
		return "", fmt.Errorf("no such operation in the %s spec: %w", kind, err)
	}
	in := &openapi3filter.RequestValidationInput{
		Request: probe, PathParams: params, Route: route,
		Options: &openapi3filter.Options{
			MultiError:         true,
			AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, // the middleware checks the key
		},
	}
	err = openapi3filter.ValidateRequest(r.Context(), in)
	r.Body = probe.Body // ValidateRequest put back what it read
	if err != nil {
		return route.Operation.OperationID, err
	}
	return route.Operation.OperationID, nil
}
