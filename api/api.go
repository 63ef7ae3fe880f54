// Package api holds the OpenAPI 3.1 document of the service's HTTP API.
// openapi.yaml is the source, edited by hand; openapi.json is its JSON form,
// embedded here and served at GET /openapi.json (`go test ./api -update`
// rewrites it; the test fails while it is stale).
package api

import _ "embed"

// OpenAPIJSON is the document as served.
//
//go:embed openapi.json
var OpenAPIJSON []byte
