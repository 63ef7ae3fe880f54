package archtest

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/fraudd/fraudd"

type pkg struct {
	ImportPath string
	Dir        string
	Name       string
	GoFiles    []string
	Imports    []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkg
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 5 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

func rel(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, module), "/") }

func under(p, dir string) bool { r := rel(p); return r == dir || strings.HasPrefix(r, dir+"/") }

// TestDependencyDirection enforces STYLE.md (the rules are in forbidden):
// intel, storage and wire import nothing of ours (intel may use its own
// subpackages); actors never import fasthttp or sonic; fastapi never imports
// Pebble, protoactor or storage (as Tailscale's deptest and Pebble's
// forbidden-imports test pin theirs); cluster imports nothing of ours but its
// own subpackages, except cluster/rpc, which wires it to the actors and the
// store, and the embedded etcd server is linked only by cmd, e2e
// and cluster's tests; only cmd reads flags.
func TestDependencyDirection(t *testing.T) {
	for _, p := range listPackages(t) {
		for _, imp := range p.Imports {
			if why := forbidden(p.ImportPath, imp); why != "" {
				t.Errorf("%s imports %s: %s", rel(p.ImportPath), rel(imp), why)
			}
		}
		if under(p.ImportPath, "cmd") || under(p.ImportPath, "e2e") {
			continue
		}
		// Only cmd reads the environment (the e2e harness passes it to the binary).
		for _, f := range p.GoFiles {
			src, err := readFile(filepath.Join(p.Dir, f))
			if err != nil {
				t.Fatal(err)
			}
			for _, call := range []string{"os.Getenv(", "os.LookupEnv(", "os.Environ("} {
				if strings.Contains(src, call) {
					t.Errorf("%s/%s calls %s: only cmd/ reads the environment", rel(p.ImportPath), f, call)
				}
			}
		}
	}
}

// forbidden says why package p may not import imp, "" when it may.
func forbidden(p, imp string) string {
	ours := strings.HasPrefix(imp, module)
	switch {
	case under(p, "intel") && ours && !under(imp, "intel"):
		return "intel imports nothing of ours"
	case under(p, "storage") && ours:
		return "storage imports nothing of ours"
	case under(p, "wire") && ours:
		return "wire (the JSON shapes) imports nothing of ours"
	case under(p, "actors") && (strings.HasPrefix(imp, "github.com/valyala/fasthttp") || strings.HasPrefix(imp, "github.com/bytedance/sonic")):
		return "actors never import fasthttp or sonic"
	case under(p, "fastapi") && (strings.HasPrefix(imp, "github.com/cockroachdb/pebble") || strings.HasPrefix(imp, "github.com/asynkron/protoactor-go")):
		return "fastapi talks to typed actor clients only"
	case under(p, "fastapi") && ours && under(imp, "storage"):
		return "fastapi never touches storage: stored records, store reads and key labels live behind the actors"
	case imp == "flag" && !under(p, "cmd"):
		return "only cmd/ parses flags"
	case under(p, "bench") && ours:
		return "bench is black-box over HTTP"
	case under(p, "cluster/rpc") && ours && !under(imp, "cluster") && !under(imp, "actors") && !under(imp, "storage"):
		return "cluster/rpc (the node-to-node service) wires cluster to the actors and the store only, never a transport"
	case under(p, "cluster") && !under(p, "cluster/rpc") && ours && !under(imp, "cluster"):
		return "cluster (etcd membership and ownership) imports nothing of ours; the wiring imports it"
	case under(imp, "cluster/embedetcd") && !under(p, "cluster") && !under(p, "cmd") && !under(p, "e2e"):
		return "the etcd server links only where an embedded member is asked for"
	}
	return ""
}

// TestForbiddenImports checks that the rules above fire: a test that could
// not fail would not guard anything.
func TestForbiddenImports(t *testing.T) {
	for _, c := range []struct {
		p, imp string
		bad    bool
	}{
		{module + "/fastapi", module + "/storage", true},
		{module + "/fastapi/collector", module + "/storage", true},
		{module + "/fastapi", "github.com/cockroachdb/pebble/v2", true},
		{module + "/fastapi", module + "/actors/checks", false},
		{module + "/actors/checks", module + "/storage", false},
		{module + "/actors/checks", "github.com/valyala/fasthttp", true},
		{module + "/wire", module + "/intel/score", true},
		{module + "/intel/score", module + "/intel/ipaddr", false},
		{module + "/intel/score", module + "/storage", true},
		{module + "/cluster", module + "/fastapi", true},
		{module + "/cluster", module + "/actors/quota", true},
		{module + "/cluster/rpc", module + "/actors/quota", false},
		{module + "/cluster/rpc", module + "/fastapi", true},
		{module + "/cluster", module + "/cluster/embedetcd", false},
		{module + "/actors/quota", module + "/cluster/embedetcd", true},
		{module + "/cmd/fraudd", module + "/cluster/embedetcd", false},
	} {
		if got := forbidden(c.p, c.imp) != ""; got != c.bad {
			t.Errorf("%s → %s: forbidden %v, want %v", rel(c.p), rel(c.imp), got, c.bad)
		}
	}
}

// TestOnePackageDoc checks that every package has exactly one doc comment.
func TestOnePackageDoc(t *testing.T) {
	for _, p := range listPackages(t) {
		n := 0
		var where []string
		for _, f := range p.GoFiles {
			fset := token.NewFileSet()
			af, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if af.Doc != nil && strings.TrimSpace(af.Doc.Text()) != "" {
				n++
				where = append(where, f)
			}
		}
		if n != 1 {
			t.Errorf("package %s has %d package doc comments (%v), want exactly 1", rel(p.ImportPath), n, where)
		}
	}
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}
