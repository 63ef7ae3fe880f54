package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/fraudd/fraudd/internal/testtools"
)

// bin is the fraudd binary built once for the whole package.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fraudd-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin, err = Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testtools.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}
