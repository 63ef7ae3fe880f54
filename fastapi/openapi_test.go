package fastapi

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/fraudd/fraudd/api"
)

// TestOpenAPIListsEveryRoute: the route table and the OpenAPI document name
// the same operations, so no route goes undocumented and the document
// promises no route the server lacks.
func TestOpenAPIListsEveryRoute(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPIJSON, &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for p, item := range doc.Paths {
		for m := range item {
			switch m {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				documented[strings.ToUpper(m)+" "+p] = true
			}
		}
	}
	e := newTestEnv(t)
	served := map[string]bool{}
	for _, rt := range e.srv.routes {
		served[rt.method+" "+rt.label()] = true
	}
	var undocumented, phantom []string
	for op := range served {
		if !documented[op] {
			undocumented = append(undocumented, op)
		}
	}
	for op := range documented {
		if !served[op] {
			phantom = append(phantom, op)
		}
	}
	sort.Strings(undocumented)
	sort.Strings(phantom)
	if len(undocumented) > 0 {
		t.Errorf("routes missing from api/openapi.yaml: %v", undocumented)
	}
	if len(phantom) > 0 {
		t.Errorf("api/openapi.yaml documents routes the server does not have: %v", phantom)
	}
}
