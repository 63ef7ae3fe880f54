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

// TestDependencyDirection enforces STYLE.md: intel, storage and wire import
// nothing of ours (intel may use its own subpackages); actors never import fasthttp or
// sonic; fastapi never imports Pebble or protoactor; only cmd reads flags.
func TestDependencyDirection(t *testing.T) {
	for _, p := range listPackages(t) {
		for _, imp := range p.Imports {
			ours := strings.HasPrefix(imp, module)
			switch {
			case under(p.ImportPath, "intel") && ours && !under(imp, "intel"):
				t.Errorf("%s imports %s: intel imports nothing of ours", rel(p.ImportPath), rel(imp))
			case under(p.ImportPath, "storage") && ours:
				t.Errorf("%s imports %s: storage imports nothing of ours", rel(p.ImportPath), rel(imp))
			case under(p.ImportPath, "wire") && ours:
				t.Errorf("%s imports %s: wire (the JSON shapes) imports nothing of ours", rel(p.ImportPath), rel(imp))
			case under(p.ImportPath, "actors") && (strings.HasPrefix(imp, "github.com/valyala/fasthttp") || strings.HasPrefix(imp, "github.com/bytedance/sonic")):
				t.Errorf("%s imports %s: actors never import fasthttp or sonic", rel(p.ImportPath), imp)
			case under(p.ImportPath, "fastapi") && (strings.HasPrefix(imp, "github.com/cockroachdb/pebble") || strings.HasPrefix(imp, "github.com/asynkron/protoactor-go")):
				t.Errorf("%s imports %s: fastapi talks to typed actor clients only", rel(p.ImportPath), imp)
			case imp == "flag" && !under(p.ImportPath, "cmd"):
				t.Errorf("%s imports flag: only cmd/ parses flags", rel(p.ImportPath))
			case under(p.ImportPath, "bench") && ours:
				t.Errorf("%s imports %s: bench is black-box over HTTP", rel(p.ImportPath), rel(imp))
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
