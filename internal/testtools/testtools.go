// Package testtools lets a test that needs an outside tool (chromium, node,
// the raw snapshots in ../shared) skip visibly. `go test ./...` throws away
// the output of a package that passed unless -v is given, so a t.Skip
// message alone goes unseen and a run without the tool looks complete. Main,
// used as a package's TestMain, prints one line per such skip where the go
// command prints its own "ok" lines.
package testtools

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

var (
	mu    sync.Mutex
	skips []string
)

// Skip records that t cannot run for want of tool and skips it; hint says
// how to get the tool.
func Skip(t testing.TB, tool, hint string) {
	t.Helper()
	msg := fmt.Sprintf("%s did not run: no %s (%s)", t.Name(), tool, hint)
	mu.Lock()
	skips = append(skips, msg)
	mu.Unlock()
	t.Skip("SKIPPED: " + msg)
}

// Main runs m and reports the skips; TestMain calls os.Exit(testtools.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	lines := skips
	mu.Unlock()
	if len(lines) == 0 {
		return code
	}
	w := visible()
	defer w.Close()
	pkg := pkgName()
	for _, l := range lines {
		fmt.Fprintf(w, "SKIP  \t%s\t%s\n", pkg, l)
	}
	return code
}

// visible returns where a line is seen without -v. With -v (or -json, which
// implies it) that is our own stdout. Without, the go command discards a
// passing package's output, so the line goes to the go command's own stdout
// (our parent's fd 1), next to its "ok" lines — but only when that is a
// terminal, a pipe or a socket, or a file opened for appending: writing into
// a plain file at another offset than the parent's would clobber its output.
func visible() io.WriteCloser {
	if testing.Verbose() {
		return nopCloser{os.Stdout}
	}
	ppid := os.Getppid()
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/1", ppid), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nopCloser{os.Stdout}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err == nil {
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFCHR, syscall.S_IFIFO, syscall.S_IFSOCK:
			return f
		case syscall.S_IFREG:
			if appending(ppid) {
				return f
			}
		}
	}
	f.Close()
	return nopCloser{os.Stdout}
}

// appending reports whether pid's fd 1 was opened with O_APPEND.
func appending(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/1", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			var flags int
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%o", &flags); err == nil {
				return flags&syscall.O_APPEND != 0
			}
		}
	}
	return false
}

// pkgName is the package under test, as a path below the module root (go
// test runs a test binary in its package's directory).
func pkgName() string {
	wd, err := os.Getwd()
	if err != nil {
		return filepath.Base(os.Args[0])
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if rel, err := filepath.Rel(dir, wd); err == nil {
				return "./" + filepath.ToSlash(rel)
			}
			break
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	return wd
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
