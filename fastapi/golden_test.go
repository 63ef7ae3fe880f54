package fastapi

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files (keys may be added, never removed)")

// golden compares body (JSON) with testdata/golden/name.json. Request ids and
// timings are normalised by the caller. With -update it rewrites the file; it
// never lets a key that a committed golden file had disappear (SPEC §9:
// within v1 changes are additive only), whatever -update says.
func golden(t *testing.T, name string, body []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", name, err, body)
	}
	var pretty bytes.Buffer
	enc := json.NewEncoder(&pretty)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "golden", name+".json")
	old, err := os.ReadFile(path)
	if err == nil {
		var ov any
		if json.Unmarshal(old, &ov) == nil {
			have := keyPaths(v, "")
			for _, k := range keyPaths(ov, "") {
				if !contains(have, k) {
					t.Errorf("%s: key %s of the committed golden file is gone (v1 is additive only)", name, k)
				}
			}
		}
	}
	if *update {
		if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: no golden file (run go test ./fastapi -update): %v", name, err)
	}
	if !bytes.Equal(old, pretty.Bytes()) {
		t.Errorf("%s differs from %s:\n got: %s\nwant: %s", name, path, pretty.Bytes(), old)
	}
}

// keyPaths lists every object key path in v ("a.b", "a[].c").
func keyPaths(v any, prefix string) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, vv := range x {
			p := strings.TrimPrefix(prefix+"."+k, ".")
			out = append(out, p)
			out = append(out, keyPaths(vv, p)...)
		}
	case []any:
		for _, vv := range x {
			out = append(out, keyPaths(vv, prefix+"[]")...)
		}
	}
	sort.Strings(out)
	return dedupe(out)
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

func contains(s []string, x string) bool {
	i := sort.SearchStrings(s, x)
	return i < len(s) && s[i] == x
}
