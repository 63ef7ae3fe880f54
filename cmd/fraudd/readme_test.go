package main

import (
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
)

// TestReadmeListsEveryServeFlag: the README's configuration table has one
// row per flag of fraudd serve, with its variable, in table form (a blank
// line inside the table would end it and leave the rest as plain text).
func TestReadmeListsEveryServeFlag(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "| flag | env | default | meaning |")
	if start < 0 {
		t.Fatal("README.md has no configuration table")
	}
	table := readme[start:]
	if end := strings.Index(table, "\n\n"); end >= 0 {
		table = table[:end]
	}
	_, err = parseServe([]string{"-h"}, nil)
	var h helpError
	if !errors.As(err, &h) {
		t.Fatalf("parseServe -h: %v", err)
	}
	rows := map[string]int{}
	for _, l := range strings.Split(table, "\n") {
		if f, _, ok := strings.Cut(strings.TrimPrefix(l, "| `--"), "`"); ok && strings.HasPrefix(l, "| `--") {
			rows[f]++
		}
	}
	h.fs.VisitAll(func(f *flag.Flag) {
		row := "| `--" + f.Name + "` | `" + envKey(f.Name) + "` |"
		switch {
		case rows[f.Name] == 0:
			t.Errorf("README.md's configuration table has no row for --%s", f.Name)
		case rows[f.Name] > 1:
			t.Errorf("README.md's configuration table has %d rows for --%s", rows[f.Name], f.Name)
		case !strings.Contains(table, row):
			t.Errorf("README.md's row for --%s does not start %q", f.Name, row)
		}
		delete(rows, f.Name)
	})
	for f := range rows {
		t.Errorf("README.md's configuration table lists --%s, which fraudd serve does not have", f)
	}
}
