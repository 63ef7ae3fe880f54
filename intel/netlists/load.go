package netlists

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"golang.org/x/net/publicsuffix"

	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// embedded holds the feed files built by `fraudd feeds build`.
//
//go:embed data/*.fdf
var embedded embed.FS

// FeedsSubdir is where, under a data directory, `fraudd feeds update` writes
// refreshed feed files and LoadDir looks for them.
const FeedsSubdir = "feeds"

// LoadEmbedded loads the feeds built into the binary. Every feed must be
// present and readable: a broken embedded set is a build error, not a
// reason to serve with less coverage.
func LoadEmbedded() (*Snapshot, error) {
	return load(nil)
}

// LoadDir loads the embedded feeds, replacing each one for which
// <dataDir>/feeds/<name>.fdf exists by that file, unless the embedded copy
// has a later snapshot date (a binary built after the last refresh ships
// newer data than the data directory holds). A missing directory is not an
// error (nothing was ever refreshed); an unreadable or corrupt override file
// is, naming the file: `feeds update` writes files atomically, so a bad one
// means something else is wrong and should not pass silently.
func LoadDir(dataDir string) (*Snapshot, error) {
	infos, err := DirFeeds(dataDir)
	if err != nil {
		return nil, err
	}
	over := map[string]string{}
	for _, in := range infos {
		if in.Source == SourceDataDir {
			over[in.Name] = in.Path
		}
	}
	return load(over)
}

// DirFeeds says, without decoding any feed body, which copy of each feed
// LoadDir would load from dataDir and what its header says. With dataDir ""
// it describes the embedded feeds.
func DirFeeds(dataDir string) ([]FeedInfo, error) {
	out := make([]FeedInfo, 0, len(FeedNames))
	for _, name := range FeedNames {
		info := FeedInfo{Name: name, Source: SourceEmbedded}
		emb, eerr := ReadEmbedded(name)
		if eerr == nil {
			if h, err := feedfile.ReadHeader(emb); err == nil {
				info.Date, info.Entries, info.Inputs = h.Date, h.Entries, h.Inputs
			} else {
				eerr = err
			}
		}
		if eerr != nil {
			info.Source = SourceMissing
		}
		if dataDir != "" {
			p := filepath.Join(dataDir, FeedsSubdir, name+feedfile.Ext)
			b, err := os.ReadFile(p)
			switch {
			case errors.Is(err, fs.ErrNotExist):
			case err != nil:
				return nil, fmt.Errorf("netlists: %w", err)
			default:
				h, err := feedfile.ReadHeader(b)
				if err != nil {
					return nil, fmt.Errorf("netlists: %s: %w", p, err)
				}
				if h.Name != name {
					return nil, fmt.Errorf("netlists: %s holds feed %q", p, h.Name)
				}
				if info.Source == SourceMissing || h.Date == "" || info.Date == "" || h.Date >= info.Date {
					info = FeedInfo{Name: name, Date: h.Date, Entries: h.Entries, Inputs: h.Inputs, Source: SourceDataDir, Path: p}
				}
			}
		}
		out = append(out, info)
	}
	return out, nil
}

// ReadFeed decodes the copy of one feed that LoadDir(dataDir) would load.
func ReadFeed(dataDir, name string) (*feedfile.File, error) {
	infos, err := DirFeeds(dataDir)
	if err != nil {
		return nil, err
	}
	for _, in := range infos {
		if in.Name == name {
			l, err := loadOne(name, in.Path)
			return l.file, err
		}
	}
	return nil, fmt.Errorf("netlists: unknown feed %s", name)
}

// ReadEmbedded returns the bytes of one embedded feed file.
func ReadEmbedded(name string) ([]byte, error) {
	b, err := embedded.ReadFile("data/" + name + feedfile.Ext)
	if err != nil {
		return nil, fmt.Errorf("netlists: embedded feed %s: %w", name, err)
	}
	return b, nil
}

// loaded is one decoded feed and where it came from.
type loaded struct {
	file *feedfile.File
	info FeedInfo
}

// load decodes every feed, in parallel since zstd and varint decoding are
// CPU-bound and the feeds are independent.
func load(over map[string]string) (*Snapshot, error) {
	res := make([]loaded, len(FeedNames))
	errs := make([]error, len(FeedNames))
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	for i, name := range FeedNames {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			res[i], errs[i] = loadOne(name, over[name])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return assemble(res)
}

// SourceBuilt marks feeds handed to FromFiles.
const SourceBuilt = "built"

// FromFiles assembles a snapshot from decoded feed files, one per name of
// FeedNames in any order: what a build or a measurement holds in memory.
// The files are not modified and may be used again.
func FromFiles(files []*feedfile.File) (*Snapshot, error) {
	byName := map[string]*feedfile.File{}
	for _, f := range files {
		byName[f.Name] = f
	}
	res := make([]loaded, len(FeedNames))
	for i, name := range FeedNames {
		f := byName[name]
		if f == nil {
			return nil, fmt.Errorf("netlists: feed %s missing", name)
		}
		if want := expectedKind[name]; f.Kind != want {
			return nil, fmt.Errorf("netlists: feed %s is of kind %s, want %s", name, f.Kind, want)
		}
		res[i] = loaded{file: f, info: FeedInfo{Name: name, Date: f.Date, Entries: f.Entries, Inputs: f.Inputs, Source: SourceBuilt}}
	}
	return assemble(res)
}

func loadOne(name, path string) (loaded, error) {
	var (
		b   []byte
		err error
	)
	info := FeedInfo{Name: name, Source: SourceEmbedded}
	if path != "" {
		info.Source, info.Path = SourceDataDir, path
		b, err = os.ReadFile(path)
	} else {
		b, err = ReadEmbedded(name)
	}
	if err != nil {
		return loaded{}, fmt.Errorf("netlists: feed %s: %w", name, err)
	}
	f, err := feedfile.Unmarshal(b)
	if err != nil {
		return loaded{}, fmt.Errorf("netlists: feed %s (%s): %w", name, info.Source, err)
	}
	if f.Name != name {
		return loaded{}, fmt.Errorf("netlists: feed file for %s holds feed %q", name, f.Name)
	}
	if want := expectedKind[name]; f.Kind != want {
		return loaded{}, fmt.Errorf("netlists: feed %s is of kind %s, want %s", name, f.Kind, want)
	}
	info.Date, info.Entries, info.Inputs = f.Date, f.Entries, f.Inputs
	return loaded{file: f, info: info}, nil
}

var expectedKind = map[string]feedfile.Kind{
	FeedTor: feedfile.KindRanges, FeedCloud: feedfile.KindRanges,
	FeedDatacenter: feedfile.KindRanges, FeedDatacenterAS: feedfile.KindASNs,
	FeedProviderAS: feedfile.KindASNs, FeedVPNProvider: feedfile.KindRanges,
	FeedVPN: feedfile.KindRanges, FeedPrivacyRelay: feedfile.KindRanges,
	FeedProxy: feedfile.KindRanges, FeedBlocklist: feedfile.KindRanges,
	FeedDisposable: feedfile.KindDomains, FeedASN: feedfile.KindRanges,
	FeedASNInfo: feedfile.KindASNs, FeedGeo: feedfile.KindRanges,
	FeedTZ: feedfile.KindZones, FeedMobileAS: feedfile.KindASNs,
	FeedMobileRanges: feedfile.KindRanges, FeedVPNASN: feedfile.KindASNs,
	FeedASNHosting: feedfile.KindShares,
}

// assemble builds the lookup structures from decoded feeds (in FeedNames
// order).
func assemble(res []loaded) (*Snapshot, error) {
	s := &Snapshot{}
	byName := map[string]*feedfile.File{}
	for _, r := range res {
		byName[r.info.Name] = r.file
		s.feeds = append(s.feeds, r.info)
	}
	rng := func(name string) *rangeFeed {
		f := newRangeFeed(byName[name].Ranges)
		return &f
	}

	// Address lists, merged into one table.
	vpnProv, cloud := rng(FeedVPNProvider), rng(FeedCloud)
	if len(vpnProv.labels) > maxLabels || len(cloud.labels) > maxLabels {
		return nil, fmt.Errorf("netlists: more than %d VPN provider or cloud labels", maxLabels)
	}
	s.vpnLabels, s.cloudLabels = vpnProv.labels, cloud.labels
	s.cloudNames = make([]string, len(cloud.labels))
	for i, l := range cloud.labels {
		s.cloudNames[i] = providerName(l)
	}
	vpnRanges := rng(FeedVPN)
	nearProv, nearAny := neighbours(byName[FeedVPNProvider].Ranges), neighbours(byName[FeedVPN].Ranges)
	layers := []layer{
		flagLayer(rng(FeedTor), flagTor),
		flagLayer(rng(FeedPrivacyRelay), flagRelay),
		labelLayer(vpnProv, vpnLabelShift),
		flagLayer(vpnRanges, flagVPN),
		{t: &nearProv, enc: func(v uint32) uint32 { return flagNear | (v+1)<<nearLabelShift }},
		flagLayer(&nearAny, flagNear),
		flagLayer(rng(FeedProxy), flagProxy),
		labelLayer(cloud, cloudLabelShift),
		flagLayer(rng(FeedDatacenter), flagDatacenter),
		flagLayer(rng(FeedBlocklist), flagBlocklist),
		flagLayer(rng(FeedMobileRanges), flagMobile),
	}
	s.lists = newRangeFeed(feedfile.Ranges{V4: combine4(layers), V6: combine6(layers)})

	// AS rows: one per AS number, joined from the four AS feeds; the range
	// table's values are rewritten from AS numbers to row indexes.
	asnRanges := byName[FeedASN].Ranges
	if len(asnRanges.Labels) != 0 {
		return nil, errors.New("netlists: asn feed must carry AS numbers, not labels")
	}
	rowOf := map[uint32]uint32{}
	row := func(asn uint32) *asnRow {
		i, ok := rowOf[asn]
		if !ok {
			i = uint32(len(s.asnRows))
			rowOf[asn] = i
			s.asnRows = append(s.asnRows, asnRow{asn: asn})
		}
		return &s.asnRows[i]
	}
	for _, r := range byName[FeedASNInfo].ASNs {
		row := row(r.ASN)
		row.org, row.country = r.Name, r.Country
	}
	// The values are rewritten in copies: the file stays as it was.
	asnRanges.V4.Val, asnRanges.V6.Val = slices.Clone(asnRanges.V4.Val), slices.Clone(asnRanges.V6.Val)
	for _, col := range [][]uint32{asnRanges.V4.Val, asnRanges.V6.Val} {
		for i, asn := range col {
			row(asn)
			col[i] = rowOf[asn]
		}
	}
	// Only AS numbers that some range maps to can ever be looked up, so the
	// lists below only mark existing rows.
	for _, r := range byName[FeedDatacenterAS].ASNs {
		if i, ok := rowOf[r.ASN]; ok {
			s.asnRows[i].datacenter = true
			s.asnRows[i].curatedDC = r.Kind == KindCuratedHosting
		}
	}
	for _, r := range byName[FeedProviderAS].ASNs {
		if i, ok := rowOf[r.ASN]; ok {
			s.asnRows[i].provider, s.asnRows[i].providerKind = providerName(r.Name), r.Kind
		}
	}
	for _, r := range byName[FeedMobileAS].ASNs {
		if i, ok := rowOf[r.ASN]; ok {
			s.asnRows[i].mobile, s.asnRows[i].carrier = true, r.Name
		}
	}
	s.asn = newRangeFeed(asnRanges)
	for i := range s.asnRows {
		s.asnRows[i].hosting = feedfile.NoShare
	}
	for _, r := range byName[FeedASNHosting].Shares {
		if i, ok := rowOf[r.ASN]; ok {
			if r.V4 != feedfile.NoShare {
				s.asnRows[i].hosting = r.V4
			} else {
				s.asnRows[i].hosting = r.V6 // IPv6 only when the AS has no IPv4: see HostingShareMin
			}
		}
	}
	s.markVPNOperators(byName[FeedVPNASN].ASNs, rowOf, rng(FeedTor))

	s.geo = *rng(FeedGeo)
	if len(s.geo.labels) == 0 {
		return nil, errors.New("netlists: geo feed carries no country labels")
	}

	doms := byName[FeedDisposable].Domains
	s.disposable = make(map[string]struct{}, len(doms))
	for _, d := range doms {
		s.disposable[d] = struct{}{}
		// A listed public suffix covers no subdomain (DisposableEmail).
		if ps, _ := publicsuffix.PublicSuffix(d); ps == d {
			if s.disposableSuffix == nil {
				s.disposableSuffix = make(map[string]struct{})
			}
			s.disposableSuffix[d] = struct{}{}
		}
	}
	zs := byName[FeedTZ].Zones
	s.zones = make(map[string]string, len(zs))
	for _, z := range zs {
		s.zones[z.Name] = z.Country
	}
	for i, in := range sourceInfo {
		if f := byName[in.feed]; f != nil {
			s.dates[i] = f.Date
		}
	}
	entries := func(name string) int { return byName[name].Entries }
	s.coverage = Coverage{
		DCRanges:          entries(FeedDatacenter),
		CloudProviders:    len(cloud.labels),
		TorExits:          entries(FeedTor),
		DisposableDomains: entries(FeedDisposable),
	}
	return s, nil
}

// markVPNOperators labels the AS rows of VPN operators. A row of kind
// KindVPNOperator names a VPN company's own AS. A KindVPNList row comes from
// a list that also names general hosts and a Tor operator, so it counts
// only for an AS on no hosting list, of no other provider kind, whose
// organisation runs no Tor exit. Every other AS registered to the
// organisation of a counted AS is read the same way: operators register
// several (PacketHub S.A. holds five).
func (s *Snapshot) markVPNOperators(rows []feedfile.ASN, rowOf map[uint32]uint32, tor *rangeFeed) {
	torOrgs := map[string]bool{}
	for _, t := range []func(yield func(key) bool){tor.v4.keys, tor.v6.keys} {
		for k := range t {
			if r := s.asnRow(&k); r != nil && r.org != "" {
				torOrgs[strings.ToLower(r.org)] = true
			}
		}
	}
	byOrg := map[string]string{}
	for _, v := range rows {
		i, ok := rowOf[v.ASN]
		if !ok {
			continue
		}
		r := &s.asnRows[i]
		org := strings.ToLower(r.org)
		var label string
		switch v.Kind {
		case KindVPNOperator:
			label = providerName(v.Name)
		case KindVPNList:
			if r.datacenter || r.providerKind != "" && r.providerKind != KindVPNOperator || torOrgs[org] {
				continue
			}
			label = r.vpnLabel()
			if label == "" {
				label = r.org
			}
		default:
			continue
		}
		if label == "" {
			continue
		}
		if r.vpn == "" {
			r.vpn = label
		}
		if _, seen := byOrg[org]; !seen && org != "" {
			byOrg[org] = label
		}
	}
	for i := range s.asnRows {
		r := &s.asnRows[i]
		if r.vpn == "" && r.org != "" {
			r.vpn = byOrg[strings.ToLower(r.org)]
		}
	}
}

// Neighbour blocks: the /24 of an IPv4 range, the /48 of an IPv6 one.
const (
	near4Mask = 1<<8 - 1
	near6Bits = 48
)

// neighbours widens every range of a VPN feed to the /24 or /48 blocks it
// touches. Where blocks of two labels meet, the earlier range keeps them.
func neighbours(r feedfile.Ranges) rangeFeed {
	var out feedfile.Ranges
	out.Labels = r.Labels
	t4 := &out.V4
	for i := range r.V4.Start {
		lo, hi := r.V4.Start[i]&^near4Mask, r.V4.End[i]|near4Mask
		if n := len(t4.Start); n > 0 && lo <= t4.End[n-1] {
			if hi <= t4.End[n-1] {
				continue
			}
			if t4.Val[n-1] == r.V4.Val[i] {
				t4.End[n-1] = hi
				continue
			}
			lo = t4.End[n-1] + 1
		}
		t4.Start, t4.End, t4.Val = append(t4.Start, lo), append(t4.End, hi), append(t4.Val, r.V4.Val[i])
	}
	t6 := &out.V6
	hostMask := feedfile.U128{Hi: 1<<(128-near6Bits-64) - 1, Lo: ^uint64(0)}
	one := feedfile.U128{Lo: 1}
	for i := range r.V6.Start {
		lo, hi := r.V6.Start[i], r.V6.End[i]
		lo = feedfile.U128{Hi: lo.Hi &^ hostMask.Hi}
		hi = feedfile.U128{Hi: hi.Hi | hostMask.Hi, Lo: ^uint64(0)}
		if n := len(t6.Start); n > 0 && !t6.End[n-1].Less(lo) {
			if !t6.End[n-1].Less(hi) {
				continue
			}
			if t6.Val[n-1] == r.V6.Val[i] {
				t6.End[n-1] = hi
				continue
			}
			lo = t6.End[n-1].Add(one)
		}
		t6.Start, t6.End, t6.Val = append(t6.Start, lo), append(t6.End, hi), append(t6.Val, r.V6.Val[i])
	}
	return newRangeFeed(out)
}
