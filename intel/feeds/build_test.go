package feeds

import (
	"os"
	"testing"
)

// sharedData is the raw snapshot directory next to the repository.
const sharedData = "../../../shared/data"

func TestBuildShared(t *testing.T) {
	if _, err := os.Stat(sharedData); err != nil {
		t.Skip("raw snapshots not present")
	}
	out := t.TempDir()
	m, err := Build(sharedData, out)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, f := range m.Feeds {
		t.Logf("%-15s %-8s %s %8d entries %9d bytes", f.Name, f.Kind, f.Date, f.Entries, f.Bytes)
		total += f.Bytes
	}
	t.Logf("total %d bytes", total)
}
