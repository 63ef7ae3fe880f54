package api

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
)

var update = flag.Bool("update", false, "rewrite openapi.json from openapi.yaml")

// toJSON converts the YAML source to the served JSON, keys in source order.
func toJSON(t *testing.T) []byte {
	t.Helper()
	src, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(src)
	if err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, j, "", "  "); err != nil {
		t.Fatal(err)
	}
	out.WriteByte('\n')
	return out.Bytes()
}

func TestServedJSONIsTheYAML(t *testing.T) {
	want := toJSON(t)
	if *update {
		if err := os.WriteFile("openapi.json", want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(OpenAPIJSON, want) {
		t.Fatal("openapi.json is not the JSON form of openapi.yaml: run go test ./api -update")
	}
}

// TestDocumentIsValidOpenAPI31 checks the document against the OpenAPI 3.1
// schema (libopenapi-validator's document validation).
func TestDocumentIsValidOpenAPI31(t *testing.T) {
	doc, err := libopenapi.NewDocument(OpenAPIJSON)
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.GetVersion(); v != "3.1.0" {
		t.Fatalf("openapi %s, want 3.1.0", v)
	}
	if _, errs := doc.BuildV3Model(); errs != nil {
		t.Fatalf("model: %v", errs)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	ok, verrs := v.ValidateDocument()
	if !ok {
		for _, e := range verrs {
			t.Errorf("%s: %s", e.Message, e.Reason)
			for _, se := range e.SchemaValidationErrors {
				t.Errorf("  %s: %s", se.FieldPath, se.Reason)
			}
		}
	}
}
