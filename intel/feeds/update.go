package feeds

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// Source is one upstream input of a refreshable feed. Several sources may
// feed one feed (Tor: Onionoo and the bulk exit list); they are combined in
// the order given, as Build combines the raw snapshots. Tests point URL at a
// loopback server.
type Source struct {
	Feed    string // feed name (netlists.Feed*)
	URL     string
	Format  Format
	Label   string // label for every range from this source (a VPN provider)
	Exclude bool   // ranges to remove from the feed instead of add
}

const (
	x4bRaw   = "https://raw.githubusercontent.com/X4BNet/lists_vpn/main/"
	userAgnt = "fraudd-feeds/1 (+https://github.com/fraudd/fraudd)"
)

// DefaultSources lists the upstream addresses of SOURCES.md for every feed
// that has one. Feeds without an upstream here (cloud ranges, whose
// providers each publish their own format; the AS, geo and time-zone tables;
// the curated provider and carrier lists) stay as embedded.
//
// The per-provider VPN lists are taken from X4B's copies (input/vpn/ips),
// which X4B refreshes daily from the providers' own APIs in a plain format.
func DefaultSources() []Source {
	return []Source{
		{Feed: FeedTor, URL: "https://onionoo.torproject.org/details?search=flag:exit%20running:true&fields=or_addresses,exit_addresses", Format: FormatOnionoo},
		{Feed: FeedTor, URL: "https://check.torproject.org/torbulkexitlist", Format: FormatAddrs},
		{Feed: FeedDatacenter, URL: x4bRaw + "output/datacenter/ipv4.txt", Format: FormatAddrLines},
		{Feed: FeedDatacenter, URL: x4bRaw + "output/datacenter/ipv6.txt", Format: FormatAddrLines},
		{Feed: FeedDatacenterAS, URL: "https://raw.githubusercontent.com/brianhama/bad-asn-list/master/bad-asn-list.csv", Format: FormatBadASNCSV},
		{Feed: FeedDatacenterAS, URL: x4bRaw + "input/datacenter/ASN.txt", Format: FormatASNList},
		{Feed: FeedVPNProvider, URL: x4bRaw + "input/vpn/ips/mullvadvpn.txt", Format: FormatAddrLines, Label: labelMullvad},
		{Feed: FeedVPNProvider, URL: x4bRaw + "input/vpn/ips/pia.txt", Format: FormatAddrLines, Label: labelPIA},
		{Feed: FeedVPNProvider, URL: x4bRaw + "input/vpn/ips/protonvpn.txt", Format: FormatAddrLines, Label: labelProton},
		{Feed: FeedVPN, URL: x4bRaw + "output/vpn/ipv4.txt", Format: FormatAddrLines},
		{Feed: FeedVPN, URL: x4bRaw + "output/vpn/ipv6.txt", Format: FormatAddrLines},
		{Feed: FeedVPN, URL: x4bRaw + "input/vpn/ips/apple.txt", Format: FormatAddrLines, Exclude: true},
		{Feed: FeedPrivacyRelay, URL: "https://mask-api.icloud.com/egress-ip-ranges.csv", Format: FormatGeofeed},
		{Feed: FeedProxy, URL: "https://raw.githubusercontent.com/monosans/proxy-list/main/proxies/all.txt", Format: FormatProxyLines},
		{Feed: FeedProxy, URL: "https://raw.githubusercontent.com/iplocate/free-proxy-list/main/all-proxies.txt", Format: FormatProxyLines},
		{Feed: FeedBlocklist, URL: "https://raw.githubusercontent.com/stamparm/ipsum/master/ipsum.txt", Format: FormatIpsum},
		{Feed: FeedDisposable, URL: "https://disposable.github.io/disposable-email-domains/domains.txt", Format: FormatDomains},
		{Feed: FeedDisposable, URL: "https://raw.githubusercontent.com/disposable-email-domains/disposable-email-domains/main/disposable_email_blocklist.conf", Format: FormatDomains},
		{Feed: FeedDisposable, URL: "https://raw.githubusercontent.com/7c/fakefilter/main/txt/data.txt", Format: FormatDomains},
		{Feed: FeedMobileRanges, URL: "https://raw.githubusercontent.com/tmobile/tmus-geofeed/main/tmus-geo-ip.txt", Format: FormatGeofeed},
		// One download refreshes both AS tables (Update fetches a URL once).
		{Feed: FeedASN, URL: ip2asnURL, Format: FormatIP2ASN},
		{Feed: FeedASNInfo, URL: ip2asnURL, Format: FormatIP2ASNInfo},
	}
}

// ip2asnURL is iptoasn.com's combined IPv4 and IPv6 table (PDDL), rebuilt
// from RouteViews every hour: addresses announced after the embedded AS
// snapshot get an AS from it.
const ip2asnURL = "https://iptoasn.com/data/ip2asn-combined.tsv.gz"

// Outcomes of one feed's update.
const (
	StatusUpdated  = "updated"  // new file written
	StatusRejected = "rejected" // downloaded but failed validation; old feed kept
	StatusFailed   = "failed"   // could not download or parse; old feed kept
)

// FeedResult is what happened to one feed.
type FeedResult struct {
	Feed    string
	Status  string
	Date    string // snapshot date of the new data
	Entries int    // entries downloaded
	Prev    int    // entries of the feed in use before
	Path    string // file written, when updated
	Err     error  // why not, when rejected or failed
}

// Report lists the outcome per feed, in source order.
type Report struct {
	Feeds []FeedResult
}

// Updated returns how many feeds got a new file.
func (r Report) Updated() int {
	n := 0
	for _, f := range r.Feeds {
		if f.Status == StatusUpdated {
			n++
		}
	}
	return n
}

// Err joins the errors of the feeds that were not updated.
func (r Report) Err() error {
	var errs []error
	for _, f := range r.Feeds {
		if f.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.Feed, f.Err))
		}
	}
	return errors.Join(errs...)
}

// maxShrink is the validation rule: a feed that comes back with fewer than
// 1/maxShrink of the entries of the one in use is rejected. Upstream lists
// move a few percent a day; losing half means a broken or truncated list,
// and keeping the old one reads as slightly stale rather than falsely clean.
const maxShrink = 2

// Update downloads every feed named in sources, validates it against the
// feed in use (prev; when nil, the one LoadDir would load from dataDir) and
// writes each accepted feed to <dataDir>/feeds/<name>.fdf atomically. A feed
// is all or nothing: if any of its sources fails, the old file stays.
//
// A feed's snapshot date is the date its content states (Onionoo's
// relays_published, a "Last update" header), else the response's
// Last-Modified, else its Date header.
//
// The error is non-nil only when nothing could be attempted (the directory
// cannot be created); per-feed failures are in the report.
func Update(ctx context.Context, client *http.Client, sources []Source, dataDir string, prev *netlists.Snapshot) (Report, error) {
	var rep Report
	dir := filepath.Join(dataDir, netlists.FeedsSubdir)
	// The data dir too, when this creates it (fraudd feeds update before
	// a first start): what it holds besides the feeds is secret.
	if err := os.MkdirAll(dir, updatedDirMode); err != nil {
		return rep, fmt.Errorf("feeds: update: %w", err)
	}
	if client == nil {
		client = http.DefaultClient
	}
	prevEntries := map[string]int{}
	prevInputs := map[string][]feedfile.Input{}
	if prev != nil {
		for _, f := range prev.Feeds() {
			prevEntries[f.Name], prevInputs[f.Name] = f.Entries, f.Inputs
		}
	} else {
		// What LoadDir would use; if the data dir is unreadable, at least
		// the embedded counts guard against a collapsed download.
		infos, err := netlists.DirFeeds(dataDir)
		if err != nil {
			infos, _ = netlists.DirFeeds("")
		}
		for _, f := range infos {
			prevEntries[f.Name], prevInputs[f.Name] = f.Entries, f.Inputs
		}
	}

	var order []string
	byFeed := map[string][]Source{}
	for _, s := range sources {
		if _, ok := byFeed[s.Feed]; !ok {
			order = append(order, s.Feed)
		}
		byFeed[s.Feed] = append(byFeed[s.Feed], s)
	}
	fc := &fetcher{client: client, got: map[string]fetched{}}
	results := map[string]FeedResult{}
	for _, name := range refinedLast(order) {
		results[name] = updateFeed(ctx, fc, name, byFeed[name], dataDir, prevEntries[name], prevInputs[name])
		if ctx.Err() != nil {
			break
		}
	}
	for _, name := range order {
		if res, ok := results[name]; ok {
			rep.Feeds = append(rep.Feeds, res)
		}
	}
	if ctx.Err() == nil {
		rep.Feeds = append(rep.Feeds, rederive(dataDir, dir, rep.Feeds, prevEntries)...)
	}
	return rep, nil
}

// refinedLast is the order in which Update assembles the feeds of order: a
// feed whose refinement reads another feed of the same update (the geo
// feed's AU-filler rule reads the AS tables) comes after it, so that it
// reads the new one.
func refinedLast(order []string) []string {
	var first, last []string
	for _, name := range order {
		sp, ok := specByName(name)
		if ok && sp.refine != nil && slices.ContainsFunc(sp.refine.inputs, func(n string) bool { return slices.Contains(order, n) }) {
			last = append(last, name)
			continue
		}
		first = append(first, name)
	}
	return append(first, last...)
}

// rederive computes the derived feeds again when one of their inputs was
// updated, from the copies LoadDir will now use, so that a refreshed AS
// table or datacenter list comes with hosting shares that match it.
func rederive(dataDir, dir string, done []FeedResult, prevEntries map[string]int) []FeedResult {
	updated := map[string]bool{}
	for _, f := range done {
		if f.Status == StatusUpdated {
			updated[f.Feed] = true
		}
	}
	var out []FeedResult
	for _, d := range derived {
		if !slices.ContainsFunc(d.inputs, func(n string) bool { return updated[n] }) {
			continue
		}
		res := FeedResult{Feed: d.name, Status: StatusFailed, Prev: prevEntries[d.name]}
		files := map[string]*feedfile.File{}
		for _, name := range d.inputs {
			f, err := netlists.ReadFeed(dataDir, name)
			if err != nil {
				res.Err = err
				break
			}
			files[name] = f
		}
		if res.Err == nil {
			res = writeDerived(d, files, dir, res)
		}
		out = append(out, res)
	}
	return out
}

func writeDerived(d derivedFeed, files map[string]*feedfile.File, dir string, res FeedResult) FeedResult {
	f, err := d.derive(files)
	if err != nil {
		res.Status, res.Err = StatusRejected, err
		return res
	}
	res.Date, res.Entries = f.Date, f.Entries
	b, err := feedfile.Marshal(nil, f)
	if err != nil {
		res.Status, res.Err = StatusRejected, err
		return res
	}
	path := filepath.Join(dir, d.name+feedfile.Ext)
	if err := writeAtomic(path, b, updatedFileMode); err != nil {
		res.Err = fmt.Errorf("writing %s: %w", path, err)
		return res
	}
	res.Status, res.Path = StatusUpdated, path
	return res
}

// fetcher downloads each URL once per update: one upstream file may feed
// several feeds (the AS table and the AS names).
type fetcher struct {
	client *http.Client
	got    map[string]fetched
}

type fetched struct {
	data []byte
	date string
	err  error
}

func (f *fetcher) fetch(ctx context.Context, url string) ([]byte, string, error) {
	if r, ok := f.got[url]; ok {
		return r.data, r.date, r.err
	}
	data, date, err := fetch(ctx, f.client, url)
	f.got[url] = fetched{data, date, err}
	return data, date, err
}

func updateFeed(ctx context.Context, fc *fetcher, name string, srcs []Source, dataDir string, prev int, prevIns []feedfile.Input) FeedResult {
	res := FeedResult{Feed: name, Status: StatusFailed, Prev: prev}
	dir := filepath.Join(dataDir, netlists.FeedsSubdir)
	sp, ok := specByName(name)
	if !ok {
		res.Err = fmt.Errorf("unknown feed %q", name)
		return res
	}
	ins := make([]input, 0, len(srcs))
	for _, s := range srcs {
		data, date, err := fc.fetch(ctx, s.URL)
		if err != nil {
			res.Err = err
			return res
		}
		ins = append(ins, input{
			part: part{format: s.Format, label: s.Label, exclude: s.Exclude, date: date},
			name: s.URL,
			data: data,
		})
	}
	// The project's curated lists ship in the binary and join the
	// downloaded inputs as they do at build time.
	for _, pt := range sp.parts {
		if pt.curated {
			in, err := curatedInput(pt)
			if err != nil {
				res.Err = err
				return res
			}
			ins = append(ins, in)
		}
	}
	f, err := assemble(sp, ins)
	if err != nil {
		res.Status, res.Err = StatusRejected, err
		return res
	}
	// The project's rule for this feed (the geo feed's AU filler), with
	// the feeds the new snapshot will use: those of this update, else the
	// data directory's or the embedded ones.
	if sp.refine != nil {
		deps := map[string]*feedfile.File{}
		for _, in := range sp.refine.inputs {
			d, err := netlists.ReadFeed(dataDir, in)
			if err != nil {
				res.Err = fmt.Errorf("%s: %w", sp.refine.name, err)
				return res
			}
			deps[in] = d
		}
		if _, err := refine(sp, f, deps); err != nil {
			res.Status, res.Err = StatusRejected, err
			return res
		}
	}
	res.Date, res.Entries = f.Date, f.Entries
	if prev > 0 && f.Entries*maxShrink < prev {
		res.Status = StatusRejected
		res.Err = fmt.Errorf("shrank from %d to %d entries (more than half); keeping the old feed", prev, f.Entries)
		return res
	}
	excluded := make([]bool, len(f.Inputs))
	for i, in := range ins {
		if i < len(excluded) {
			excluded[i] = in.exclude
		}
	}
	if err := inputShrank(prevIns, f.Inputs, excluded); err != nil {
		res.Status, res.Err = StatusRejected, err
		return res
	}
	b, err := feedfile.Marshal(nil, f)
	if err != nil {
		res.Status, res.Err = StatusRejected, err
		return res
	}
	path := filepath.Join(dir, name+feedfile.Ext)
	if err := writeAtomic(path, b, updatedFileMode); err != nil {
		res.Err = fmt.Errorf("writing %s: %w", path, err)
		return res
	}
	res.Status, res.Path = StatusUpdated, path
	return res
}

// inputShrank applies maxShrink to each source of a feed, not only to its
// total: a source that is a small part of its feed (the IPv6 list beside
// the IPv4 one) could collapse to a line and leave the total within bounds,
// its table replaced by nearly nothing. An exclusion source (excluded[i])
// is the other way round: one that grows past maxShrink times its size
// takes that much more out of the feed. The sources are compared in order,
// and only when there are as many as before: a feed whose sources changed
// has nothing to compare them with. A rule's entry (rulePrefix: the ranges
// the AU-filler rule moved) is no download and is not compared: an upstream
// that fixes its own rows leaves the rule less to do.
func inputShrank(prev, cur []feedfile.Input, excluded []bool) error {
	if len(prev) != len(cur) {
		return nil
	}
	for i, in := range cur {
		if strings.HasPrefix(in.Name, rulePrefix) || strings.HasPrefix(prev[i].Name, rulePrefix) {
			continue
		}
		p := prev[i].Entries
		if p > 0 && in.Entries*maxShrink < p {
			return fmt.Errorf("source %d (%s) shrank from %d to %d entries (more than half); keeping the old feed", i+1, in.Name, p, in.Entries)
		}
		if i < len(excluded) && excluded[i] && p > 0 && in.Entries > p*maxShrink {
			return fmt.Errorf("exclusion source %d (%s) grew from %d to %d entries (more than double); keeping the old feed", i+1, in.Name, p, in.Entries)
		}
	}
	return nil
}

// fetch downloads one source and returns its (gunzipped) body and the date
// the response gives for it.
func fetch(ctx context.Context, client *http.Client, url string) ([]byte, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, "", fmt.Errorf("GET %s: %w", url, err)
	}
	req.Header.Set("User-Agent", userAgnt)
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxInput+1))
	if err != nil {
		return nil, "", fmt.Errorf("GET %s: reading body: %w", url, err)
	}
	if len(body) > maxInput {
		return nil, "", fmt.Errorf("GET %s: body larger than %d bytes", url, maxInput)
	}
	if len(body) > 2 && body[0] == 0x1f && body[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, "", fmt.Errorf("GET %s: %w", url, err)
		}
		body, err = io.ReadAll(io.LimitReader(zr, maxInput+1))
		if err != nil || len(body) > maxInput {
			return nil, "", fmt.Errorf("GET %s: bad or oversized gzip body", url)
		}
	}
	return body, responseDate(resp.Header), nil
}

func responseDate(h http.Header) string {
	for _, k := range []string{"Last-Modified", "Date"} {
		if v := h.Get(k); v != "" {
			if t, err := http.ParseTime(v); err == nil {
				return t.UTC().Format(time.DateOnly)
			}
		}
	}
	return ""
}
