// Package netlists answers what is known about an address, an e-mail domain
// or a time zone from the project's intelligence feeds: Tor exits, privacy
// relays, VPN and proxy ranges, cloud and datacenter ranges, blocklists,
// AS numbers, organisations and countries.
//
// A Snapshot is immutable once loaded, so lookups take no locks; a Store
// hands out the current one and a refresh swaps in a new one atomically.
// Lookups do not allocate. The feeds ship embedded in the binary
// (LoadEmbedded) so the service works offline; files written by
// `fraudd feeds update` into a data directory override them feed by feed
// (LoadDir).
package netlists

import (
	"net/netip"
	"slices"
	"strings"

	"golang.org/x/net/idna"

	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// Snapshot is one immutable set of loaded feeds. The zero value and a nil
// *Snapshot answer "nothing known" to every question.
type Snapshot struct {
	lists       rangeFeed // address-list feeds merged; value is flag bits and label indexes
	vpnLabels   []string  // vpn-provider labels; the neighbour layer indexes them too
	cloudLabels []string  // cloud provider ids
	cloudNames  []string  // their display names
	asn         rangeFeed // value indexes asnRows
	asnRows     []asnRow
	geo         rangeFeed // value indexes geo.labels (country codes)
	disposable  map[string]struct{}
	// disposableSuffix: the listed names that are public suffixes, which
	// cover no subdomain (DisposableEmail).
	disposableSuffix map[string]struct{}
	zones            map[string]string
	feeds            []FeedInfo
	coverage         Coverage
	dates            [nSources]string // snapshot date of the feed behind each Source
}

// asnRow is everything known about one AS, joined at load so a lookup needs
// one search.
type asnRow struct {
	asn          uint32
	org, country string // organisation, registration country
	datacenter   bool   // on a datacenter AS list
	provider     string // provider display name from the provider-by-ASN list
	providerKind string // its kind ("cloud", "hosting", "vpn", …)
	mobile       bool   // mobile or satellite carrier
	carrier      string
	curatedDC    bool   // datacenter only through the project's curated hosting list
	hosting      uint16 // share of the AS's space in datacenter or cloud ranges, basis points; feedfile.NoShare when unknown
	vpn          string // VPN operator label when the AS is a VPN company's own network
}

// hostingAS reports whether the AS hosts servers: on a hosting list, above
// the hosting share, or a cloud, hosting, CDN or VPN provider. Residential
// and mobile networks never are.
func (r *asnRow) hostingAS() bool {
	if r == nil || r.mobile {
		return false
	}
	switch r.providerKind {
	case "cloud", "hosting", "cdn", KindVPNOperator:
		return true
	}
	return r.datacenter || r.vpn != "" || r.overShare()
}

func (r *asnRow) overShare() bool {
	return r.hosting != feedfile.NoShare && r.hosting >= HostingShareMin
}

// HostingShareMin is the share of an AS's announced space, in basis points,
// from which the AS counts as a datacenter AS. It was chosen by measurement
// on the embedded feeds (see intel/feeds TestHostingShareThreshold): at 20%
// every AS among the 300 largest above it is a cloud, hosting or CDN network,
// the largest consumer and mobile networks stay under 1%, and 220 hosting
// networks on no hosting list are found.
const HostingShareMin = 2000

// FeedInfo describes one loaded feed.
type FeedInfo struct {
	Name    string
	Date    string // snapshot date, YYYY-MM-DD; "" when the sources carry none
	Entries int    // distinct entries as the sources count them; 0 = not loaded
	Source  string // SourceEmbedded or SourceDataDir
	Path    string // file read, for SourceDataDir
	// Inputs are the feed's sources with their entry counts, as its file's
	// header lists them (a refresh checks each against its new copy).
	Inputs []feedfile.Input
}

// Where a feed was loaded from.
const (
	SourceEmbedded = "embedded"
	SourceDataDir  = "data dir"
	SourceMissing  = "missing"
)

// Coverage is what the threat feed (SPEC 2.4) reports. A zero count means a
// feed did not load (fail-open), not that nothing is covered.
type Coverage struct {
	DCRanges          int // datacenter ranges
	CloudProviders    int // distinct provider ids in the published cloud ranges
	TorExits          int
	DisposableDomains int
}

// Classification is everything the feeds say about one address.
//
// The anonymity flags are exclusive and decided in the order of SOURCES.md:
// Tor, then privacy relay, then VPN (named providers, then the X4B list),
// then open proxy. The X4B VPN list contains Apple's relay ranges and Tor
// operators' networks, so checking in this order keeps relay users
// PrivacyRelay and Tor exits Tor.
//
// The hosting facts (Cloud, Datacenter) are reported next to a VPN, proxy
// or Tor flag, since those servers live in datacenters (test_vpn answers
// "VPN and datacenter"), but not next to PrivacyRelay: relay egress runs on
// CDN networks (Akamai, Cloudflare, Fastly) that the datacenter lists
// include, yet the visitor behind it is an ordinary device user.
//
// Datacenter is true for a published cloud range, a datacenter range or a
// datacenter AS number. 8.8.8.8 is in the X4B datacenter list but in no
// published Google Cloud range: it reads Datacenter true, Cloud "", Service
// "Google", ASN 15169 — no visitor browses from Google's own resolvers.
type Classification struct {
	Sources      Source // every source that set a flag; see Evidence
	HostingShare uint16 // the AS's hosting share in basis points when SourceHostingShare fired
	Tor          bool
	PrivacyRelay bool
	VPN          bool
	VPNService   string // provider label ("Mullvad", "NordVPN") when known, else ""
	OpenProxy    bool
	Cloud        string // provider id from the published cloud ranges ("aws", "gcp")
	Datacenter   bool
	Service      string // best provider label for network.service, "" when none
	Blocklisted  bool   // on 3+ public blocklists (device.ip_blocklisted)
	Mobile       bool   // mobile or satellite carrier (shared exits)
	Carrier      string // carrier name when Mobile and known
	ASN          uint32 // 0 when unknown
	Org          string // AS organisation
	Country      string // ISO 3166-1 alpha-2 of the address, "" when unknown
	RegCountry   string // where the AS is registered (display only)
}

// Source names one reason a flag was set. A Classification carries every
// source that fired as a bit set, so a caller can say why (the evidence
// array of an evaluation) without Classify allocating.
type Source uint16

// Sources, in the order they are reported.
const (
	SourceTorExits         Source = 1 << iota // the Tor exit list
	SourcePrivacyRelay                        // iCloud Private Relay egress ranges
	SourceVPNProviders                        // a named VPN provider's server list
	SourceVPNRanges                           // the generic VPN range list
	SourceVPNASN                              // the AS is a VPN operator's own network
	SourceVPNNeighbour                        // same /24 or /48 as a listed VPN range, in a hosting AS
	SourceOpenProxy                           // the open proxy lists
	SourceCloudRanges                         // a published cloud range
	SourceDatacenterRanges                    // the datacenter range list
	SourceDatacenterASN                       // the AS is on a hosting AS list
	SourceHostingASN                          // the AS is on the project's curated hosting list
	SourceHostingShare                        // the AS's hosting share is over HostingShareMin
	nSourceBits            = iota
)

const nSources = nSourceBits

// Flags of the evidence array.
const (
	FlagTor          = "tor"
	FlagPrivacyRelay = "privacy_relay"
	FlagVPN          = "vpn"
	FlagProxy        = "proxy"
	FlagDatacenter   = "datacenter"
)

// sourceInfo is how a source is reported: the flag it sets, its name in
// the evidence array, and the feed whose date says how fresh it is ("" for
// sources that are not a dated list).
var sourceInfo = [nSources]struct{ flag, name, feed string }{
	{FlagTor, "tor_exits", FeedTor},
	{FlagPrivacyRelay, "privacy_relay_ranges", FeedPrivacyRelay},
	{FlagVPN, "vpn_provider_list", FeedVPNProvider},
	{FlagVPN, "vpn_ranges", FeedVPN},
	{FlagVPN, "asn", FeedVPNASN},
	{FlagVPN, "vpn_neighbour", ""},
	{FlagProxy, "open_proxies", FeedProxy},
	{FlagDatacenter, "cloud_ranges", FeedCloud},
	{FlagDatacenter, "datacenter_ranges", FeedDatacenter},
	{FlagDatacenter, "datacenter_asn", FeedDatacenterAS},
	{FlagDatacenter, "hosting_asn_curated", FeedDatacenterAS},
	{FlagDatacenter, "asn_hosting_share", FeedASNHosting},
}

// Flag is the network flag a single source sets.
func (s Source) Flag() string { return s.info().flag }

// Name is the source's name in the evidence array.
func (s Source) Name() string { return s.info().name }

func (s Source) info() struct{ flag, name, feed string } {
	for i := range nSources {
		if s == 1<<i {
			return sourceInfo[i]
		}
	}
	return struct{ flag, name, feed string }{}
}

// Each calls fn for every source in the set, in order.
func (s Source) Each(fn func(Source)) {
	for i := range nSources {
		if s&(1<<i) != 0 {
			fn(1 << i)
		}
	}
}

// Listed returns the snapshot date of the list behind a single source, ""
// when it is not a dated list.
func (s *Snapshot) Listed(src Source) string {
	if s == nil {
		return ""
	}
	for i := range nSources {
		if src == 1<<i {
			return s.dates[i]
		}
	}
	return ""
}

// Anonymous reports whether any anonymisation layer fired (network.anonymous).
func (c *Classification) Anonymous() bool {
	return c.Tor || c.PrivacyRelay || c.VPN || c.OpenProxy
}

// Verdicts of a bare lookup (SPEC 2.3).
const (
	VerdictAllow  = "allow"
	VerdictReview = "review"
	VerdictBlock  = "block"
)

// Risk scores of a bare lookup (SPEC 2.3).
const (
	ScoreTor   = 90
	ScoreCloud = 40
)

// BareResult is the answer for a bare address (GET /v1/lookup, the free
// lookup tools, MCP lookup_ip). Only the Tor exit list and the published
// cloud ranges are consulted, as SPEC 1 and 2.3 say.
//
// Known is true only when one of those two matched. The AS table answers for
// nearly every routed address, so counting it would make known always true
// and "known: false ⇒ signals null" meaningless; ASN, Org and RegCountry are
// filled in either way for the network object, whose source is "asn_table".
type BareResult struct {
	Known       bool
	Tor         bool   // signals.tor
	Datacenter  bool   // signals.dch: in a published cloud range
	Anonymous   bool   // signals.anon: Tor
	Cloud       string // network.cloud: provider id, "" when none
	Verdict     string
	RiskScore   int
	ASN         uint32 // network.asn, 0 when unknown
	Org         string // network.org
	RegCountry  string // network.registration_country
	TorListed   string // snapshot date of the Tor exit list when it matched
	CloudListed string // snapshot date of the cloud ranges when they matched
}

func makeKey(a netip.Addr) key {
	a = a.Unmap()
	switch {
	case a.Is4():
		b := a.As4()
		return key{v4: true, ok: true, a4: uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])}
	case a.Is6():
		return key{ok: true, a6: feedfile.FromAddr16(a)}
	}
	return key{}
}

func (s *Snapshot) asnRow(k *key) *asnRow {
	if v, ok := s.asn.find(k); ok && int(v) < len(s.asnRows) {
		return &s.asnRows[v]
	}
	return nil
}

// Classify reports what the feeds say about a. It does not allocate.
//
// Beyond the lists, three rules read the AS:
//   - an AS that a VPN company runs for its servers (the vpn-asn feed and
//     every other AS of the same organisation) is VPN with that company's
//     label;
//   - an AS whose hosting share is over HostingShareMin is datacenter;
//   - an address in the /24 (IPv4) or /48 (IPv6) of a listed VPN range is
//     VPN with that range's label when its own AS hosts servers, never in a
//     residential or mobile network.
//
// They come after the lists in the order of precedence, so a list's answer
// and label always win.
func (s *Snapshot) Classify(a netip.Addr) Classification {
	var c Classification
	k := makeKey(a)
	if s == nil || !k.ok {
		return c
	}
	row := s.asnRow(&k)
	if row != nil {
		c.ASN, c.Org, c.RegCountry = row.asn, row.org, row.country
	}
	c.Country, _ = s.geo.label(&k)
	f, _ := s.lists.find(&k)
	mobile := row != nil && row.mobile || f&flagMobile != 0

	switch vpnLabel := f >> vpnLabelShift & labelMask; {
	case f&flagTor != 0:
		c.Tor, c.Sources = true, SourceTorExits
	case f&flagRelay != 0:
		c.PrivacyRelay, c.Sources = true, SourcePrivacyRelay
	case vpnLabel != 0:
		c.VPN, c.VPNService, c.Sources = true, s.vpnLabels[vpnLabel-1], SourceVPNProviders
	case f&flagVPN != 0:
		c.VPN, c.Sources = true, SourceVPNRanges
		c.VPNService = row.vpnLabel()
	case f&flagProxy != 0:
		c.OpenProxy, c.Sources = true, SourceOpenProxy
	case row != nil && row.vpn != "" && !mobile:
		c.VPN, c.VPNService, c.Sources = true, row.vpn, SourceVPNASN
	case f&flagNear != 0 && !mobile && (row.hostingAS() || f&(flagDatacenter|cloudLabelMask) != 0):
		c.VPN, c.Sources = true, SourceVPNNeighbour
		if near := f >> nearLabelShift & labelMask; near != 0 {
			c.VPNService = s.vpnLabels[near-1]
		} else {
			c.VPNService = row.vpnLabel()
		}
	}

	cloud := f >> cloudLabelShift & labelMask
	if !c.PrivacyRelay {
		if cloud != 0 {
			c.Cloud = s.cloudLabels[cloud-1]
			c.Sources |= SourceCloudRanges
		}
		if f&flagDatacenter != 0 {
			c.Sources |= SourceDatacenterRanges
		}
		if row != nil {
			switch {
			case row.datacenter && !row.curatedDC:
				c.Sources |= SourceDatacenterASN
			case row.datacenter && !mobile:
				c.Sources |= SourceHostingASN
			}
			// The rules added for unlisted networks stand back inside
			// mobile networks; a hosting list's word stays as it was.
			if !mobile && row.overShare() {
				c.Sources |= SourceHostingShare
				c.HostingShare = row.hosting
			}
		}
		c.Datacenter = c.Sources&(SourceCloudRanges|SourceDatacenterRanges|SourceDatacenterASN|SourceHostingASN|SourceHostingShare) != 0
	} else {
		cloud = 0
	}

	switch {
	case c.Tor:
		c.Service = ServiceTor
	case c.PrivacyRelay:
		c.Service = ServicePrivacyRelay
	case c.VPNService != "":
		c.Service = c.VPNService
	case cloud != 0:
		c.Service = s.cloudNames[cloud-1]
	case (c.VPN || c.OpenProxy || c.Datacenter) && row != nil:
		c.Service = row.provider
	}

	c.Blocklisted = f&flagBlocklist != 0
	if row != nil && row.mobile {
		c.Mobile, c.Carrier = true, row.carrier
	} else if f&flagMobile != 0 {
		c.Mobile = true
	}
	return c
}

// vpnLabel is the VPN provider an AS names, "" when none.
func (r *asnRow) vpnLabel() string {
	switch {
	case r == nil:
		return ""
	case r.vpn != "":
		return r.vpn
	case r.providerKind == KindVPNOperator:
		return r.provider
	}
	return ""
}

// Bare answers a bare-address lookup (SPEC 2.3): Tor exit → block 90, published
// cloud range → review 40, else allow 0 with Known false. It does not
// allocate. Country and city are not part of a bare answer.
func (s *Snapshot) Bare(a netip.Addr) BareResult {
	r := BareResult{Verdict: VerdictAllow}
	k := makeKey(a)
	if s == nil || !k.ok {
		return r
	}
	if row := s.asnRow(&k); row != nil {
		r.ASN, r.Org, r.RegCountry = row.asn, row.org, row.country
	}
	f, _ := s.lists.find(&k)
	if cloud := f >> cloudLabelShift & labelMask; cloud != 0 {
		r.Known, r.Datacenter, r.Cloud = true, true, s.cloudLabels[cloud-1]
		r.Verdict, r.RiskScore = VerdictReview, ScoreCloud
		r.CloudListed = s.Listed(SourceCloudRanges)
	}
	if f&flagTor != 0 {
		r.Known, r.Tor, r.Anonymous = true, true, true
		r.Verdict, r.RiskScore = VerdictBlock, ScoreTor
		r.TorListed = s.Listed(SourceTorExits)
	}
	return r
}

// Country returns the ISO country of a, "" when unknown.
func (s *Snapshot) Country(a netip.Addr) string {
	k := makeKey(a)
	if s == nil || !k.ok {
		return ""
	}
	c, _ := s.geo.label(&k)
	return c
}

// maxDomain is the longest domain name (RFC 1035).
const maxDomain = 253

// DisposableEmail reports whether an e-mail address (or a bare domain) is at
// a disposable-mail domain or a subdomain of one (of a listed registrable
// domain: a listed public suffix matches only itself). Case and a trailing dot do
// not matter, nor does the form of an internationalised name: the lists
// hold A-labels (xn--…), so a domain written in Unicode is looked up by its
// A-label. It does not allocate for an ASCII domain.
func (s *Snapshot) DisposableEmail(emailOrDomain string) bool {
	if s == nil || len(s.disposable) == 0 {
		return false
	}
	d := emailOrDomain
	for i := len(d) - 1; i >= 0; i-- {
		if d[i] == '@' {
			d = d[i+1:]
			break
		}
	}
	d = trimSpaceASCII(d)
	if !isASCII(d) {
		// IDNA's lookup mapping also folds case, full-width letters and
		// the ideographic full stop (。) that stands for a dot. A name it
		// refuses is looked up as written: it matches nothing listed.
		if a, err := idna.Lookup.ToASCII(d); err == nil {
			d = a
		}
	}
	if len(d) > 0 && d[len(d)-1] == '.' {
		d = d[:len(d)-1]
	}
	if d == "" || len(d) > maxDomain {
		return false
	}
	var buf [maxDomain]byte
	b := buf[:len(d)]
	for i := 0; i < len(d); i++ {
		c := d[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	// Try the name, then each parent that still has a dot in it: a listed
	// "mailinator.com" covers "x.mailinator.com", but "com" is never tried.
	// A listed public suffix (the lists hold a few: msk.ru, pp.ua, za.com,
	// ddns.net) matches itself only: the names under it are unrelated
	// registrants' domains, not the list's disposable service.
	for parent := false; ; parent = true {
		if _, ok := s.disposable[string(b)]; ok {
			if _, suffix := s.disposableSuffix[string(b)]; !parent || !suffix {
				return true
			}
		}
		dot := -1
		for i, c := range b {
			if c == '.' {
				dot = i
				break
			}
		}
		if dot < 0 {
			return false
		}
		b = b[dot+1:]
		if !containsDot(b) {
			return false
		}
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func containsDot(b []byte) bool {
	for _, c := range b {
		if c == '.' {
			return true
		}
	}
	return false
}

func trimSpaceASCII(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t' || s[len(s)-1] == '\n' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}

// ZoneCountry returns the ISO country of an IANA time zone name, including
// backward-compatible names (Asia/Calcutta, US/Eastern). Names are
// case-sensitive, as in the tz database. It does not allocate.
func (s *Snapshot) ZoneCountry(tz string) (country string, ok bool) {
	country, _, ok = s.ZoneCountries(tz)
	return country, ok
}

// ZoneCountries is ZoneCountry plus the other countries tzdata says use the
// zone (zone1970.tab: Europe/Zurich is CH's and also DE's, for Büsingen, and
// LI's), space-separated and sorted ("DE LI"), "" when none. It does not
// allocate.
func (s *Snapshot) ZoneCountries(tz string) (country, others string, ok bool) {
	if s == nil {
		return "", "", false
	}
	v, ok := s.zones[tz]
	if !ok {
		return "", "", false
	}
	country, others, _ = strings.Cut(v, " ")
	return country, others, true
}

// Coverage returns the counts for the threat feed.
func (s *Snapshot) Coverage() Coverage {
	if s == nil {
		return Coverage{}
	}
	return s.coverage
}

// Feeds lists every feed with its date, size and origin, in a fixed order.
func (s *Snapshot) Feeds() []FeedInfo {
	if s == nil {
		return nil
	}
	return slices.Clone(s.feeds)
}
