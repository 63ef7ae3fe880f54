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

	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// Snapshot is one immutable set of loaded feeds. The zero value and a nil
// *Snapshot answer "nothing known" to every question.
type Snapshot struct {
	lists       rangeFeed // address-list feeds merged; value is flag bits and label indexes
	vpnLabels   []string  // vpn-provider labels
	cloudLabels []string  // cloud provider ids
	cloudNames  []string  // their display names
	asn         rangeFeed // value indexes asnRows
	asnRows     []asnRow
	geo         rangeFeed // value indexes geo.labels (country codes)
	disposable  map[string]struct{}
	zones       map[string]string
	feeds       []FeedInfo
	coverage    Coverage
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
}

// FeedInfo describes one loaded feed.
type FeedInfo struct {
	Name    string
	Date    string // snapshot date, YYYY-MM-DD; "" when the sources carry none
	Entries int    // distinct entries as the sources count them; 0 = not loaded
	Source  string // SourceEmbedded or SourceDataDir
	Path    string // file read, for SourceDataDir
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
	Known      bool
	Tor        bool   // signals.tor
	Datacenter bool   // signals.dch: in a published cloud range
	Anonymous  bool   // signals.anon: Tor
	Cloud      string // network.cloud: provider id, "" when none
	Verdict    string
	RiskScore  int
	ASN        uint32 // network.asn, 0 when unknown
	Org        string // network.org
	RegCountry string // network.registration_country
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

	switch vpnLabel := f >> vpnLabelShift & labelMask; {
	case f&flagTor != 0:
		c.Tor = true
	case f&flagRelay != 0:
		c.PrivacyRelay = true
	case vpnLabel != 0:
		c.VPN, c.VPNService = true, s.vpnLabels[vpnLabel-1]
	case f&flagVPN != 0:
		c.VPN = true
		if row != nil && row.providerKind == "vpn" {
			c.VPNService = row.provider
		}
	case f&flagProxy != 0:
		c.OpenProxy = true
	}

	cloud := f >> cloudLabelShift & labelMask
	if c.PrivacyRelay {
		cloud = 0
	} else {
		if cloud != 0 {
			c.Cloud = s.cloudLabels[cloud-1]
		}
		c.Datacenter = cloud != 0 || f&flagDatacenter != 0 || row != nil && row.datacenter
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
	}
	if f&flagTor != 0 {
		r.Known, r.Tor, r.Anonymous = true, true, true
		r.Verdict, r.RiskScore = VerdictBlock, ScoreTor
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
// a disposable-mail domain or a subdomain of one. Case and a trailing dot do
// not matter. It does not allocate.
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
	for {
		if _, ok := s.disposable[string(b)]; ok {
			return true
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
	if s == nil {
		return "", false
	}
	country, ok = s.zones[tz]
	return country, ok
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
