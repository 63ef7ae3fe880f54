package feeds

import (
	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// Feed names, shared with the reader.
const (
	FeedTor          = netlists.FeedTor
	FeedCloud        = netlists.FeedCloud
	FeedDatacenter   = netlists.FeedDatacenter
	FeedDatacenterAS = netlists.FeedDatacenterAS
	FeedProviderAS   = netlists.FeedProviderAS
	FeedVPNProvider  = netlists.FeedVPNProvider
	FeedVPN          = netlists.FeedVPN
	FeedPrivacyRelay = netlists.FeedPrivacyRelay
	FeedProxy        = netlists.FeedProxy
	FeedBlocklist    = netlists.FeedBlocklist
	FeedDisposable   = netlists.FeedDisposable
	FeedASN          = netlists.FeedASN
	FeedASNInfo      = netlists.FeedASNInfo
	FeedGeo          = netlists.FeedGeo
	FeedTZ           = netlists.FeedTZ
	FeedMobileAS     = netlists.FeedMobileAS
	FeedMobileRanges = netlists.FeedMobileRanges
	FeedASNHosting   = netlists.FeedASNHosting
	FeedVPNASN       = netlists.FeedVPNASN
)

// part is one input of a feed built from the raw snapshots.
type part struct {
	path     string // under the raw data directory; may be a glob, newest name wins
	format   Format
	label    string // label for every range of this input ("" keeps the parser's)
	exclude  bool   // addresses to remove from the feed instead of add
	date     string // snapshot date when neither the name nor the content has one
	curated  bool   // path is under this package's curated/ directory, not the raw data
	onlyKind string // keep only AS rows of this kind
	setKind  string // give every AS row this kind
	// override: its rows win over the inputs' rows they tie with (the
	// same range): corrections of a source's own rows, which a narrower
	// row would not reach.
	override bool
}

// spec says how one feed is assembled.
type spec struct {
	name     string
	kind     feedfile.Kind
	labelled bool // range values index a label table (else they are raw values)
	parts    []part
	// refine: a rule of this project applied to the assembled feed, at
	// build and update time alike (the geo feed's AU-filler rule).
	refine *refinement
}

// Snapshot dates of inputs whose names and contents carry none: the commit
// dates of the origins named in ../shared/data/SOURCES.md (read from those
// repositories), the package date for the npm tables, and the gathering
// date for the lists curated in this project.
const (
	dateX4B            = "2026-08-22" // X4BNet/lists_vpn@167937a
	dateCloud          = "2026-08-22" // lord-alfred/ipranges@14dd971, hexydec/ip-ranges@8634da8
	dateBrianhama      = "2026-03-18" // brianhama/bad-asn-list@cac788b
	dateHroost         = "2026-08-17" // hroost/icloud-private-relay-iplist@16f49af
	dateMonosans       = "2026-08-22" // monosans/proxy-list@e576324
	dateIplocate       = "2026-08-22" // iplocate/free-proxy-list@7f8bc0b
	dateDisposable     = "2026-08-08" // disposable/disposable-email-domains@1378ead
	dateDEDomains      = "2026-08-21" // disposable-email-domains/disposable-email-domains@a645893
	dateIPDB           = "2026-06-17" // @ip-location-db/*@2.3.2026061719
	dateCurated        = "2026-11-22" // curated in this project when the data was gathered
	dateTMobile        = "2026-08-22" // termermc/tmobile-ip-ranges@ddd8bcf
	dateVPNOperators   = "2026-11-23" // curated/vpn_operator_asns.csv
	dateCuratedHosting = "2026-11-23" // curated/hosting_asns.csv
	dateGeoFixes       = "2026-11-28" // curated/geo_fixes.csv
	dateNotHosting     = "2026-11-28" // curated/not_hosting_asns.csv
)

// VPN provider labels, as they appear in network.service.
const (
	labelMullvad = "Mullvad"
	labelPIA     = "Private Internet Access"
	labelProton  = "Proton VPN"
)

// specs lists every feed in the order they are built and listed (a feed
// another one's refinement reads comes before it). The order of parts matters where entries collide: the first part wins (zone names, ASN
// rows, identical ranges with different labels).
var specs = []spec{
	{name: FeedTor, kind: feedfile.KindRanges, parts: []part{
		{path: "tor/exits_onionoo_*.txt", format: FormatAddrs},
		{path: "tor/torbulkexitlist_*.txt", format: FormatAddrs},
	}},
	{name: FeedCloud, kind: feedfile.KindRanges, labelled: true, parts: []part{
		{path: "cloud/cloud_ranges_merged.csv", format: FormatCloudCSV, date: dateCloud},
	}},
	{name: FeedDatacenter, kind: feedfile.KindRanges, parts: []part{
		{path: "datacenter/x4bnet-datacenter-ipv4.txt.gz", format: FormatAddrLines, date: dateX4B},
		{path: "datacenter/x4bnet-datacenter-ipv6.txt.gz", format: FormatAddrLines, date: dateX4B},
	}},
	{name: FeedDatacenterAS, kind: feedfile.KindASNs, parts: []part{
		{path: "datacenter/brianhama-bad-asn-list.csv", format: FormatBadASNCSV, date: dateBrianhama},
		{path: "datacenter/x4bnet-datacenter-ASN.txt", format: FormatASNList, date: dateX4B},
		// Last, so that an AS on a list above keeps that list's row.
		{path: "hosting_asns.csv", format: FormatProviderASN, curated: true, onlyKind: "hosting", setKind: KindCuratedHosting, date: dateCuratedHosting},
		// Access networks a hosting list names by mistake (MTN and Airtel
		// Nigeria on brianhama's list): taken out, whichever list names them.
		{path: "not_hosting_asns.csv", format: FormatBadASNCSV, curated: true, exclude: true, date: dateNotHosting},
	}},
	{name: FeedProviderAS, kind: feedfile.KindASNs, parts: []part{
		{path: "cloud/provider_asn_labels_seed.csv", format: FormatProviderASN, date: dateCurated},
	}},
	{name: FeedVPNProvider, kind: feedfile.KindRanges, labelled: true, parts: []part{
		{path: "vpn/x4bnet-input-mullvadvpn.txt", format: FormatAddrLines, label: labelMullvad, date: dateX4B},
		{path: "vpn/x4bnet-input-pia.txt", format: FormatAddrLines, label: labelPIA, date: dateX4B},
		{path: "vpn/x4bnet-input-protonvpn.txt", format: FormatAddrLines, label: labelProton, date: dateX4B},
	}},
	// The X4B VPN list carries Apple's relay egress; those lines are taken
	// out here (and the relay feed is checked first anyway), so a relay user
	// is never read as a VPN user.
	{name: FeedVPN, kind: feedfile.KindRanges, parts: []part{
		{path: "vpn/x4bnet-vpn-ipv4.txt", format: FormatAddrLines, date: dateX4B},
		{path: "vpn/x4bnet-vpn-ipv6.txt", format: FormatAddrLines, date: dateX4B},
		{path: "vpn/x4bnet-input-apple.txt", format: FormatAddrLines, exclude: true, date: dateX4B},
	}},
	{name: FeedPrivacyRelay, kind: feedfile.KindRanges, parts: []part{
		{path: "privacy-relay/hroost-ipv4-ranges.txt", format: FormatAddrLines, date: dateHroost},
		{path: "privacy-relay/hroost-ipv6-ranges.txt", format: FormatAddrLines, date: dateHroost},
	}},
	{name: FeedProxy, kind: feedfile.KindRanges, parts: []part{
		{path: "proxy/monosans-all.txt", format: FormatProxyLines, date: dateMonosans},
		{path: "proxy/iplocate-all-proxies.txt", format: FormatProxyLines, date: dateIplocate},
	}},
	{name: FeedBlocklist, kind: feedfile.KindRanges, parts: []part{
		{path: "blocklist/ipsum-counts.txt.gz", format: FormatIpsum},
	}},
	{name: FeedDisposable, kind: feedfile.KindDomains, parts: []part{
		{path: "disposable-email/disposable-domains.txt.gz", format: FormatDomains, date: dateDisposable},
		{path: "disposable-email/dedomains-disposable_email_blocklist.conf", format: FormatDomains, date: dateDEDomains},
		{path: "disposable-email/fakefilter-data.txt", format: FormatDomains},
	}},
	{name: FeedASN, kind: feedfile.KindRanges, parts: []part{
		{path: "asn/asn-ipv4.csv.gz", format: FormatASNRanges, date: dateIPDB},
		{path: "asn/asn-ipv6.csv.gz", format: FormatASNRanges, date: dateIPDB},
	}},
	{name: FeedASNInfo, kind: feedfile.KindASNs, parts: []part{
		{path: "asn/asn_org_regcountry.csv.gz", format: FormatASNOrgCC, date: dateIPDB},
	}},
	{name: FeedGeo, kind: feedfile.KindRanges, labelled: true, parts: []part{
		{path: "geo/geo-whois-asn-country-ipv4.csv.gz", format: FormatGeoRanges, date: dateIPDB},
		{path: "geo/geo-whois-asn-country-ipv6.csv.gz", format: FormatGeoRanges, date: dateIPDB},
		{path: "geo_fixes.csv", format: FormatGeoRanges, curated: true, date: dateGeoFixes, override: true},
	}, refine: auFiller},
	// tz_country.csv first: it has the backward names (Asia/Calcutta), each
	// zone's own country and, in countries_1970, every country that uses it
	// (zone1970.tab); a zone matches an address in any of them.
	{name: FeedTZ, kind: feedfile.KindZones, parts: []part{
		{path: "tz/tz_country.csv", format: FormatTzCountry},
		{path: "tz/zone.tab", format: FormatZoneTab},
		{path: "tz/zone1970.tab", format: FormatZoneTab},
	}},
	{name: FeedMobileAS, kind: feedfile.KindASNs, parts: []part{
		{path: "mobile/mobile_carrier_asns_seed.csv", format: FormatMobileASN, date: dateCurated},
	}},
	{name: FeedMobileRanges, kind: feedfile.KindRanges, parts: []part{
		{path: "mobile/tmobile-us-geofeed-ranges.txt", format: FormatAddrLines, date: dateTMobile},
	}},
	// VPN operators' AS numbers (kind "vpn", with a provider id) first, then
	// the X4B VPN AS list (kind "vpn-list"), which also names general hosts
	// and a Tor operator: netlists uses those rows only for networks that
	// are on no hosting list and carry no Tor exit.
	{name: FeedVPNASN, kind: feedfile.KindASNs, parts: []part{
		{path: "cloud/provider_asn_labels_seed.csv", format: FormatProviderASN, onlyKind: KindVPNOperator, date: dateCurated},
		{path: "vpn_operator_asns.csv", format: FormatProviderASN, curated: true, onlyKind: KindVPNOperator, date: dateVPNOperators},
		{path: "vpn/x4bnet-vpn-ASN.txt", format: FormatASNList, setKind: KindVPNList, date: dateX4B},
	}},
}

// Kinds of the vpn-asn feed's rows, shared with the reader.
const (
	KindVPNOperator = netlists.KindVPNOperator
	KindVPNList     = netlists.KindVPNList
	// KindCuratedHosting marks the datacenter-asn rows of the project's
	// curated hosting list.
	KindCuratedHosting = netlists.KindCuratedHosting
)

func specByName(name string) (spec, bool) {
	for _, s := range specs {
		if s.name == name {
			return s, true
		}
	}
	return spec{}, false
}
