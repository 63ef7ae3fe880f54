package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fraudd/fraudd/internal/testtools"
)

// readmeBlock is one fenced block of the README's curl section: a shell
// block, and the answer block that follows it (want; empty when none).
type readmeBlock struct {
	line int
	sh   string
	want string
}

// readmeCurls extracts the fenced blocks between the readme-curls markers.
func readmeCurls(t *testing.T) []readmeBlock {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var blocks []readmeBlock
	in := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.TrimSpace(l) == "<!-- readme-curls:begin -->":
			in = true
			continue
		case strings.TrimSpace(l) == "<!-- readme-curls:end -->":
			in = false
			continue
		}
		if !in || !strings.HasPrefix(l, "```") {
			continue
		}
		lang, start := strings.TrimPrefix(l, "```"), i+1
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
		}
		body := strings.Join(lines[start:i], "\n")
		switch lang {
		case "sh":
			blocks = append(blocks, readmeBlock{line: start, sh: body})
		case "json":
			if len(blocks) == 0 || blocks[len(blocks)-1].want != "" {
				t.Fatalf("README.md:%d: an answer block must follow a sh block", start)
			}
			blocks[len(blocks)-1].want = body
		default:
			t.Fatalf("README.md:%d: block of kind %q in the curl section (sh and json only)", start, lang)
		}
	}
	if len(blocks) < 8 {
		t.Fatalf("found %d curl blocks in README.md; the markers moved?", len(blocks))
	}
	return blocks
}

// TestReadmeCurls runs the README's curl section, block by block in one
// shell, against the binary started as `go run ./cmd/fraudd` would start it
// (no test clock, generated secrets), and checks each answer against the one
// the README shows. "…" in a shown string matches any text from there on;
// "…" alone matches any value.
func TestReadmeCurls(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			testtools.Skip(t, tool, "apt-get install -y curl jq; the README's curl walk-through")
		}
	}
	blocks := readmeCurls(t)
	work := t.TempDir()
	s := StartServer(t, &Server{Bin: bin, DataDir: filepath.Join(work, "data"), Bare: true, NoTestClock: true})
	const sep = "\n@@readme-block-end@@\n"
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	for _, b := range blocks {
		script.WriteString(strings.ReplaceAll(b.sh, "http://localhost:8080", s.URL))
		script.WriteString("\nprintf '" + strings.ReplaceAll(sep, "\n", `\n`) + "'\n")
	}
	cmd := exec.Command("bash", "-c", script.String())
	cmd.Dir = work
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	outs := strings.Split(stdout.String(), sep)
	if err != nil {
		t.Fatalf("README curl section failed in block %d (README.md:%d): %v\nstderr:\n%s\nserver:\n%s",
			len(outs), blocks[min(len(outs), len(blocks))-1].line, err, stderr.String(), s.Logs())
	}
	for i, b := range blocks {
		got := outs[i]
		if b.want == "" {
			if strings.TrimSpace(got) != "" {
				t.Errorf("README.md:%d: the block printed %q but the README shows no answer", b.line, got)
			}
			continue
		}
		want, err := jsonStream(b.want)
		if err != nil {
			t.Fatalf("README.md:%d: the shown answer is not JSON: %v", b.line, err)
		}
		have, err := jsonStream(got)
		if err != nil {
			t.Errorf("README.md:%d: the answer is not JSON: %v\n%s", b.line, err, got)
			continue
		}
		if len(have) != len(want) {
			t.Errorf("README.md:%d: %d answers, the README shows %d:\n%s", b.line, len(have), len(want), got)
			continue
		}
		for j := range want {
			if msg := matchShown(want[j], have[j], ""); msg != "" {
				t.Errorf("README.md:%d: answer %d: %s\ngot: %s", b.line, j+1, msg, got)
			}
		}
	}
}

func jsonStream(s string) ([]any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var out []any
	for {
		var v any
		if err := dec.Decode(&v); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
}

// matchShown compares an answer with the one the README shows; it returns
// "" when they match, else where they differ.
func matchShown(want, got any, at string) string {
	if w, ok := want.(string); ok && strings.Contains(w, "…") {
		if w == "…" {
			return ""
		}
		g, ok := got.(string)
		if !ok || !strings.HasPrefix(g, w[:strings.Index(w, "…")]) {
			return fmt.Sprintf("%s: got %v, README shows %q", at, got, w)
		}
		return ""
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: got %v, README shows an object", at, got)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				return fmt.Sprintf("%s.%s: in the answer but not in the README", at, k)
			}
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Sprintf("%s.%s: in the README but not in the answer", at, k)
			}
			if m := matchShown(wv, gv, at+"."+k); m != "" {
				return m
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: got %v, README shows %v", at, got, w)
		}
		for i := range w {
			if m := matchShown(w[i], g[i], fmt.Sprintf("%s[%d]", at, i)); m != "" {
				return m
			}
		}
		return ""
	default:
		if fmt.Sprint(want) != fmt.Sprint(got) {
			return fmt.Sprintf("%s: got %v, README shows %v", at, got, want)
		}
		return ""
	}
}
