// Package feeds turns raw intelligence snapshots into the compact feed files
// that intel/netlists embeds, refreshes them from their public upstream
// addresses, and reports their status.
//
// Build reads the raw snapshots (../shared/data, see its SOURCES.md) once,
// when a developer regenerates intel/netlists/data. Update downloads the
// refreshable feeds into <data-dir>/feeds, where netlists.LoadDir picks them
// up feed by feed; Refresher runs Update on an interval and swaps the new
// snapshot into a netlists.Store without blocking lookups.
package feeds

import (
	"compress/gzip"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// curatedFS holds the lists curated in this project that are inputs of a
// build next to the raw snapshots.
//
//go:embed curated/*.csv
var curatedFS embed.FS

// curatedPrefix names a curated input in a feed header.
const curatedPrefix = "fraudd:intel/feeds/curated/"

func curatedInput(pt part) (input, error) {
	data, err := curatedFS.ReadFile("curated/" + pt.path)
	if err != nil {
		return input{}, err
	}
	return input{part: pt, name: curatedPrefix + pt.path, data: data}, nil
}

// FeedSummary is one feed of a Manifest.
type FeedSummary struct {
	Name    string           `json:"name"`
	Kind    string           `json:"kind"`
	Date    string           `json:"date"`
	Entries int              `json:"entries"`
	Bytes   int              `json:"bytes"`
	Inputs  []feedfile.Input `json:"inputs"`
}

// Manifest lists the feeds a Build wrote. Build also writes it as
// manifest.json next to the feed files, for people reading diffs; readers use
// each file's own header.
type Manifest struct {
	Feeds []FeedSummary `json:"feeds"`
}

// ManifestFile is the name of the manifest Build writes.
const ManifestFile = "manifest.json"

// input is one input's bytes with what the feed spec says about them.
type input struct {
	part
	name string // file name or URL, for the header
	data []byte
}

// Build reads the raw snapshots under fromDir and writes one compact file
// per feed into outDir, plus manifest.json. It stops at the first feed that
// cannot be built: a partial set of embedded feeds would ship silently
// reduced coverage.
func Build(fromDir, outDir string) (Manifest, error) {
	var m Manifest
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return m, fmt.Errorf("feeds: build: %w", err)
	}
	built, err := buildFiles(fromDir)
	if err != nil {
		return m, err
	}
	for _, name := range netlists.FeedNames {
		f := built[name]
		b, err := feedfile.Marshal(nil, f)
		if err != nil {
			return m, fmt.Errorf("feeds: build %s: %w", name, err)
		}
		if err := writeAtomic(filepath.Join(outDir, name+feedfile.Ext), b, builtFileMode); err != nil {
			return m, fmt.Errorf("feeds: build %s: %w", name, err)
		}
		m.Feeds = append(m.Feeds, summary(f, len(b)))
	}
	js, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, fmt.Errorf("feeds: build manifest: %w", err)
	}
	if err := writeAtomic(filepath.Join(outDir, ManifestFile), append(js, '\n'), builtFileMode); err != nil {
		return m, fmt.Errorf("feeds: build manifest: %w", err)
	}
	return m, nil
}

// buildFiles builds every feed of netlists.FeedNames in memory: the spec
// feeds from the raw snapshots, then the derived ones from those.
func buildFiles(fromDir string) (map[string]*feedfile.File, error) {
	built := map[string]*feedfile.File{}
	for _, sp := range specs {
		ins, err := buildInputs(fromDir, sp)
		if err != nil {
			return nil, fmt.Errorf("feeds: build %s: %w", sp.name, err)
		}
		f, err := assemble(sp, ins)
		if err != nil {
			return nil, fmt.Errorf("feeds: build %s: %w", sp.name, err)
		}
		if _, err := refine(sp, f, built); err != nil {
			return nil, fmt.Errorf("feeds: build %s: %w", sp.name, err)
		}
		built[sp.name] = f
	}
	for _, d := range derived {
		f, err := d.derive(built)
		if err != nil {
			return nil, fmt.Errorf("feeds: build %s: %w", d.name, err)
		}
		built[d.name] = f
	}
	for _, name := range netlists.FeedNames {
		if built[name] == nil {
			return nil, fmt.Errorf("feeds: build: no spec for feed %s", name)
		}
	}
	return built, nil
}

// buildInputs reads the inputs of sp: the raw snapshots under fromDir and
// the curated lists.
func buildInputs(fromDir string, sp spec) ([]input, error) {
	var ins []input
	for _, pt := range sp.parts {
		if pt.curated {
			in, err := curatedInput(pt)
			if err != nil {
				return nil, err
			}
			ins = append(ins, in)
			continue
		}
		path, err := newest(filepath.Join(fromDir, pt.path))
		if err != nil {
			return nil, err
		}
		data, err := readMaybeGzip(path)
		if err != nil {
			return nil, err
		}
		ins = append(ins, input{part: pt, name: filepath.ToSlash(rel(fromDir, path)), data: data})
	}
	return ins, nil
}

func summary(f *feedfile.File, size int) FeedSummary {
	return FeedSummary{Name: f.Name, Kind: f.Kind.String(), Date: f.Date, Entries: f.Entries, Bytes: size, Inputs: f.Inputs}
}

// newest resolves a glob to the lexically greatest match, which for the
// dated snapshot names (exits_onionoo_2026-08-22.txt) is the newest.
func newest(pattern string) (string, error) {
	matches, err := filepath.Glob(pattern)
	if err != nil {
		return "", fmt.Errorf("bad pattern %s: %w", pattern, err)
	}
	if len(matches) == 0 {
		return "", fmt.Errorf("no input matches %s", pattern)
	}
	sort.Strings(matches)
	return matches[len(matches)-1], nil
}

func rel(base, path string) string {
	if r, err := filepath.Rel(base, path); err == nil {
		return r
	}
	return filepath.Base(path)
}

// maxInput bounds one decompressed input; the largest raw table is ~40 MB.
const maxInput = 512 << 20

func readMaybeGzip(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if filepath.Ext(path) == ".gz" {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	b, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxInput {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxInput)
	}
	return b, nil
}

// Modes of what the feeds commands write: the embedded feeds Build writes
// into the source tree are ordinary repository files; what Update writes
// lives in the data directory, which is the operator's alone (0700
// directories, 0600 files, as fraudd serve keeps it).
const (
	builtFileMode   = 0o644
	updatedFileMode = 0o600
	updatedDirMode  = 0o700
)

// writeAtomic writes data to path through a temporary file and a rename, so
// a reader (or a crash) never sees half a file; the file gets mode.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	_, werr := tmp.Write(data)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(name)
		return err
	}
	if err := os.Chmod(name, mode); err != nil {
		os.Remove(name)
		return err
	}
	if err := os.Rename(name, path); err != nil {
		os.Remove(name)
		return err
	}
	// The new name lives in the directory: without its sync a crash can
	// bring back the old file (still a usable feed, but not the one the
	// update reported written).
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

var errEmptyInput = errors.New("input has no entries")

// assemble parses a feed's inputs and builds its file. Every input must
// contribute entries.
func assemble(sp spec, ins []input) (*feedfile.File, error) {
	f := &feedfile.File{Header: feedfile.Header{Name: sp.name, Kind: sp.kind}}
	var spans, excl []span
	exclASN := map[uint32]bool{} // AS numbers an exclusion input names
	order := 0
	for _, in := range ins {
		p, err := parse(in.format, in.data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", in.name, err)
		}
		// An input with nothing in it (an empty or comment-only body) is a
		// failed input: the feed would silently lose that input's part.
		if p.entries() == 0 {
			return nil, fmt.Errorf("%s: %w", in.name, errEmptyInput)
		}
		date := nameDate(in.name)
		if date == "" {
			date = p.date
		}
		if date == "" {
			date = in.date
		}
		if in.onlyKind != "" {
			p.asns = slices.DeleteFunc(p.asns, func(a feedfile.ASN) bool { return a.Kind != in.onlyKind })
		}
		f.Inputs = append(f.Inputs, feedfile.Input{Name: in.name, Date: date, Entries: p.entries()})
		// A curated list's date says when it was written, not how fresh
		// the world it describes is: it does not date the feed.
		if date > f.Date && !in.exclude && !in.curated {
			f.Date = date
		}
		if in.setKind != "" {
			for i := range p.asns {
				p.asns[i].Kind = in.setKind
			}
		}
		for i := range p.spans {
			if in.label != "" {
				p.spans[i].label = in.label
			}
			p.spans[i].order = order
			if in.override {
				p.spans[i].order = -1 - order // below every other input's: wins a tie
			}
			order++
		}
		if in.exclude {
			excl = append(excl, p.spans...)
			for _, a := range p.asns {
				exclASN[a.ASN] = true
			}
			continue
		}
		spans = append(spans, p.spans...)
		f.ASNs = append(f.ASNs, p.asns...)
		f.Domains = append(f.Domains, p.domains...)
		f.Zones = append(f.Zones, p.zones...)
	}
	switch sp.kind {
	case feedfile.KindRanges:
		f.Entries = countDistinct(spans)
		// Entries counts what the sources list, before the exclusions: a
		// wrong exclusion file (the list itself served in its place) would
		// leave that count whole while the table lost it, and the shrink
		// checks would pass a feed that flags nothing.
		if gone := excludedEntries(spans, excl); gone*maxShrink > f.Entries {
			return nil, fmt.Errorf("the exclusions remove %d of the feed's %d entries (more than half); a wrong exclusion list?", gone, f.Entries)
		}
		f.Ranges = buildRanges(spans, excl, sp.labelled)
	case feedfile.KindASNs:
		f.ASNs = slices.DeleteFunc(f.ASNs, func(a feedfile.ASN) bool { return exclASN[a.ASN] })
		f.ASNs = feedfile.SortASNs(f.ASNs)
		f.Entries = len(f.ASNs)
	case feedfile.KindDomains:
		f.Domains = feedfile.SortDomains(f.Domains)
		f.Entries = len(f.Domains)
	case feedfile.KindZones:
		f.Zones = feedfile.SortZones(f.Zones)
		f.Entries = len(f.Zones)
	}
	if f.Entries == 0 {
		return nil, errors.New("feed is empty")
	}
	return f, nil
}

// excludedEntries counts the distinct entries of spans (as countDistinct
// counts them) that the exclusions cover whole, so that none of their
// addresses is left in the table.
func excludedEntries(spans, excl []span) int {
	if len(excl) == 0 {
		return 0
	}
	one := feedfile.U128{Lo: 1}
	union := func(v4 bool) []span {
		var u []span
		for _, x := range excl {
			if x.v4 == v4 {
				u = append(u, x)
			}
		}
		slices.SortFunc(u, func(a, b span) int { return a.lo.Cmp(b.lo) })
		out := u[:0]
		for _, x := range u {
			if n := len(out); n > 0 && (!out[n-1].hi.Less(x.lo) || !out[n-1].hi.IsMax() && out[n-1].hi.Add(one) == x.lo) {
				if out[n-1].hi.Less(x.hi) {
					out[n-1].hi = x.hi
				}
				continue
			}
			out = append(out, x)
		}
		return out
	}
	u4, u6 := union(true), union(false)
	gone := 0
	for _, s := range distinct(spans) {
		u := u6
		if s.v4 {
			u = u4
		}
		// The last excluded run starting at or before s.lo.
		i := sort.Search(len(u), func(i int) bool { return s.lo.Less(u[i].lo) }) - 1
		if i >= 0 && !u[i].hi.Less(s.hi) {
			gone++
		}
	}
	return gone
}

// countDistinct counts distinct (family, range, label) entries: the figure a
// reader of the sources would give ("2,277 exits"), not the number of
// merged ranges stored.
func countDistinct(spans []span) int { return len(distinct(spans)) }

// distinct is spans without repeats of a (family, range, label, value)
// entry, the first of each kept, in order.
func distinct(spans []span) []span {
	type key struct {
		v4     bool
		lo, hi feedfile.U128
		label  string
		value  uint32
	}
	seen := make(map[key]struct{}, len(spans))
	out := make([]span, 0, len(spans))
	for _, s := range spans {
		k := key{s.v4, s.lo, s.hi, s.label, s.value}
		if _, dup := seen[k]; !dup {
			seen[k] = struct{}{}
			out = append(out, s)
		}
	}
	return out
}

// buildRanges normalises spans into the two tables of a Ranges body.
func buildRanges(spans, excl []span, labelled bool) feedfile.Ranges {
	var r feedfile.Ranges
	index := map[string]uint32{}
	if labelled {
		for _, s := range spans {
			index[s.label] = 0
		}
		for l := range index {
			r.Labels = append(r.Labels, l)
		}
		slices.Sort(r.Labels)
		for i, l := range r.Labels {
			index[l] = uint32(i)
		}
	}
	val := func(s span) uint32 {
		if labelled {
			return index[s.label]
		}
		return s.value
	}
	var s4, s6, x4, x6 []span
	for _, s := range spans {
		if s.v4 {
			s4 = append(s4, s)
		} else {
			s6 = append(s6, s)
		}
	}
	for _, s := range excl {
		if s.v4 {
			x4 = append(x4, s)
		} else {
			x6 = append(x6, s)
		}
	}
	zero := func(span) uint32 { return 0 }
	r.V4 = toTable4(subtract(flatten(s4, val), flatten(x4, zero)))
	r.V6 = toTable6(subtract(flatten(s6, val), flatten(x6, zero)))
	return r
}
