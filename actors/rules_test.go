package actors

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestHouseRules: every package under actors/ has exactly one package doc and
// imports neither fasthttp nor sonic (STYLE.md: actors talk to the HTTP edge
// only through typed clients).
func TestHouseRules(t *testing.T) {
	docs := map[string]int{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		test := strings.HasSuffix(path, "_test.go")
		dir := filepath.Dir(path)
		if _, ok := docs[dir]; !ok {
			docs[dir] = 0
		}
		if f.Doc != nil && !test {
			docs[dir]++
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.Contains(p, "valyala/fasthttp") || strings.Contains(p, "bytedance/sonic") {
				t.Errorf("%s imports %s", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, n := range docs {
		if n != 1 {
			t.Errorf("package %s has %d package docs, want 1", dir, n)
		}
	}
}
