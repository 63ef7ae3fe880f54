package testtools

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestChildSkips only skips, in the child process TestSkipIsReported starts.
func TestChildSkips(t *testing.T) {
	if os.Getenv("TESTTOOLS_CHILD") != "1" {
		return
	}
	Skip(t, "frobnicator", "apt-get install -y frobnicator")
}

func TestSkipIsReported(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestChildSkips$", "-test.v")
	cmd.Env = append(os.Environ(), "TESTTOOLS_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	want := "SKIP  \t./internal/testtools\tTestChildSkips did not run: no frobnicator (apt-get install -y frobnicator)\n"
	if !strings.Contains(string(out), want) {
		t.Fatalf("child output lacks the skip line %q:\n%s", want, out)
	}
}
