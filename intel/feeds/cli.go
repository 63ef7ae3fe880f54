package feeds

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/fraudd/fraudd/intel/netlists"
)

// The functions below do the work of `fraudd feeds …` on already-parsed
// options, so that cmd/fraudd only reads flags.

// RunBuild builds the embedded feeds from the raw snapshots in from into
// out and prints what it wrote.
func RunBuild(from, out string, stdout io.Writer) error {
	m, err := Build(from, out)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "feed\tkind\tdate\tentries\tbytes")
	total := 0
	for _, f := range m.Feeds {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", f.Name, f.Kind, orDash(f.Date), f.Entries, f.Bytes)
		total += f.Bytes
	}
	fmt.Fprintf(tw, "total\t\t\t\t%d\n", total)
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("feeds: writing output: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %d feeds and %s to %s\n", len(m.Feeds), ManifestFile, out)
	return nil
}

// SelectSources keeps the sources of the named feeds (all when names is
// empty) and reports names that match no source.
func SelectSources(all []Source, names []string) ([]Source, error) {
	if len(names) == 0 {
		return all, nil
	}
	var out []Source
	for _, n := range names {
		found := false
		for _, s := range all {
			if s.Feed == n {
				out = append(out, s)
				found = true
			}
		}
		if !found {
			var known []string
			for _, s := range all {
				if !slices.Contains(known, s.Feed) {
					known = append(known, s.Feed)
				}
			}
			return nil, fmt.Errorf("feed %q has no upstream (refreshable: %s)", n, strings.Join(known, ", "))
		}
	}
	return out, nil
}

// RunUpdate refreshes the feeds of sources into dataDir, checks that the
// result loads, and prints one line per feed. The error is non-nil when any
// feed was not updated or the result does not load.
func RunUpdate(ctx context.Context, client *http.Client, sources []Source, dataDir string, stdout io.Writer) error {
	rep, err := Update(ctx, client, sources, dataDir, nil)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "feed\tstatus\tdate\tentries\tbefore\tnote")
	for _, f := range rep.Feeds {
		note := f.Path
		if f.Err != nil {
			note = f.Err.Error()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", f.Feed, f.Status, orDash(f.Date), f.Entries, f.Prev, note)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("feeds: writing output: %w", err)
	}
	if rep.Updated() > 0 {
		if _, err := netlists.LoadDir(dataDir); err != nil {
			return fmt.Errorf("feeds: refreshed feeds do not load: %w", err)
		}
	}
	return rep.Err()
}

// RunStatus prints every feed's name, date, entry count and origin.
func RunStatus(dataDir string, stdout io.Writer) error {
	infos, err := Status(dataDir)
	if err != nil {
		return err
	}
	PrintStatus(stdout, infos)
	return nil
}

// PrintStatus writes a table of feeds, each followed by its inputs
// (indented: the snapshots it was built from, the curated files and the
// rules that corrected it, with the entries each gave), so that what a
// feed's header records, e.g. the ranges the AU-filler rule moved, can be
// read without decoding the file.
func PrintStatus(w io.Writer, infos []netlists.FeedInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "feed\tdate\tentries\tsource")
	for _, f := range infos {
		src := f.Source
		if f.Path != "" {
			src += " (" + f.Path + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", f.Name, orDash(f.Date), f.Entries, src)
		for _, in := range f.Inputs {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t\n", in.Name, orDash(in.Date), in.Entries) // the empty source cell keeps the columns aligned
		}
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
