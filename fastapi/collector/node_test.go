package collector

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fraudd/fraudd/internal/testtools"
)

// source is the collector's source tree (collector/ at the repository root).
const source = "../../collector"

func TestMain(m *testing.M) { os.Exit(testtools.Main(m)) }

// TestCollectorNodeSuite runs the collector's own tests (`node --test
// collector/`) and checks that the embedded collector.min.js is the build of
// the current source, so `go test ./...` covers the JavaScript too.
func TestCollectorNodeSuite(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testtools.Skip(t, "node", "apt-get install -y nodejs; the collector's JavaScript tests")
	}
	// Stat the sources so go test's result cache sees an edited script.
	if err := filepath.WalkDir(source, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			_, err = os.Stat(p)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"collector/build.mjs", "--check"}, {"--test", "collector/"}} {
		cmd := exec.Command(node, args...)
		cmd.Dir = "../.."
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("node %v: %v\n%s", args, err, out)
		}
	}
}
