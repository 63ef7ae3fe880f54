package feeds

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fraudd/fraudd/intel/ipaddr"
	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// Format names how an input's bytes are read.
type Format string

// Input formats. Each parser skips blank lines and '#' comments and fails on
// a line it cannot read only when nothing at all could be read, so that one
// odd line upstream does not throw a whole feed away while a wrong file (an
// HTML error page, say) still does.
const (
	FormatAddrLines   Format = "addr-lines"   // one address, CIDR or a-b range per line
	FormatAddrs       Format = "addrs"        // one public address per line (Tor exits)
	FormatProxyLines  Format = "proxy-lines"  // scheme://ip:port or ip:port per line
	FormatIpsum       Format = "ipsum"        // "ip<TAB>count"; kept when count >= 3
	FormatOnionoo     Format = "onionoo"      // Onionoo details JSON (or_addresses, exit_addresses)
	FormatGeofeed     Format = "geofeed"      // RFC 8805 CSV: prefix,cc,region,city,…
	FormatCloudCSV    Format = "cloud-csv"    // cidr,provider
	FormatASNRanges   Format = "asn-ranges"   // start,end,asn,org
	FormatGeoRanges   Format = "geo-ranges"   // start,end,cc
	FormatASNOrgCC    Format = "asn-org-cc"   // asn,org,registration_country
	FormatASNList     Format = "asn-list"     // "AS123 # comment" per line
	FormatBadASNCSV   Format = "bad-asn-csv"  // ASN,Entity
	FormatProviderASN Format = "provider-asn" // asn,provider,kind,asn_org_in_db,reg_cc
	FormatMobileASN   Format = "mobile-asn"   // asn,carrier,country,kind,confidence,note
	FormatDomains     Format = "domains"      // one domain per line
	FormatZoneTab     Format = "zone-tab"     // tzdata zone.tab / zone1970.tab
	FormatTzCountry   Format = "tz-country"   // tz,country,countries_1970
	FormatIP2ASN      Format = "ip2asn"       // iptoasn.com TSV: range_start, range_end, AS_number, country_code, AS_description
	FormatIP2ASNInfo  Format = "ip2asn-info"  // the same TSV read as AS number → organisation, registration country
)

// minIpsumCount is the ipsum level kept: addresses on at least this many
// blocklists. Lower levels carry too many false positives to score on.
const minIpsumCount = 3

// parsed is what one input contributed.
type parsed struct {
	spans   []span
	asns    []feedfile.ASN
	domains []string
	zones   []feedfile.Zone
	date    string // snapshot date found in the content, "" if none
	skipped int    // lines that could not be read
}

func (p *parsed) entries() int {
	return len(p.spans) + len(p.asns) + len(p.domains) + len(p.zones)
}

var errNothing = errors.New("no entries could be read")

// parse reads data in the given format.
func parse(format Format, data []byte) (*parsed, error) {
	// A byte order mark would glue itself to the first entry, which then
	// does not read.
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	p := &parsed{date: headerDate(data)}
	var err error
	switch format {
	case FormatAddrLines:
		err = eachLine(data, p, func(line string) bool {
			sp, ok := parseAddrOrRange(line)
			if ok {
				p.spans = append(p.spans, sp)
			}
			return ok
		})
	case FormatAddrs:
		// A list of single hosts: a range or a private address in it is a
		// wrong or garbled file's, never a block of exits.
		err = eachLine(data, p, func(line string) bool {
			a, err := netip.ParseAddr(line)
			if err != nil || a.Zone() != "" || !ipaddr.IsPublic(a.Unmap()) {
				return false
			}
			a = a.Unmap()
			p.spans = append(p.spans, spanOfPrefix(netip.PrefixFrom(a, a.BitLen())))
			return true
		})
	case FormatProxyLines:
		err = eachLine(data, p, func(line string) bool {
			a, err := ipaddr.ParseLoose(line)
			if err != nil || !ipaddr.IsPublic(a) {
				return false
			}
			p.spans = append(p.spans, spanOfPrefix(netip.PrefixFrom(a, a.BitLen())))
			return true
		})
	case FormatIpsum:
		err = eachLine(data, p, func(line string) bool {
			f := strings.Fields(line)
			if len(f) != 2 {
				return false
			}
			n, err := strconv.Atoi(f[1])
			a, aerr := netip.ParseAddr(f[0])
			if err != nil || aerr != nil {
				return false
			}
			if n >= minIpsumCount {
				a = a.Unmap()
				p.spans = append(p.spans, spanOfPrefix(netip.PrefixFrom(a, a.BitLen())))
			}
			return true
		})
	case FormatOnionoo:
		err = parseOnionoo(data, p)
	case FormatGeofeed:
		err = eachCSV(data, p, 1, func(rec []string) bool {
			sp, ok := parseAddrOrRange(rec[0])
			if ok {
				p.spans = append(p.spans, sp)
			}
			return ok
		})
	case FormatCloudCSV:
		err = eachCSV(data, p, 2, func(rec []string) bool {
			pf, err := netip.ParsePrefix(strings.TrimSpace(rec[0]))
			prov := strings.ToLower(strings.TrimSpace(rec[1]))
			if err != nil || prov == "" {
				return false
			}
			sp := spanOfPrefix(pf)
			if tooWide(sp) {
				return false // as parseAddrOrRange: no list takes a /0
			}
			sp.label = prov
			p.spans = append(p.spans, sp)
			return true
		})
	case FormatASNRanges:
		err = eachCSV(data, p, 3, func(rec []string) bool {
			sp, ok := csvRange(rec[0], rec[1])
			asn, err := strconv.ParseUint(strings.TrimSpace(rec[2]), 10, 32)
			if !ok || err != nil {
				return false
			}
			sp.value = uint32(asn)
			p.spans = append(p.spans, sp)
			return true
		})
	case FormatGeoRanges:
		err = eachCSV(data, p, 3, func(rec []string) bool {
			sp, ok := csvRange(rec[0], rec[1])
			cc := strings.ToUpper(strings.TrimSpace(rec[2]))
			if !ok || !isCountry(cc) {
				return false
			}
			sp.label = cc
			p.spans = append(p.spans, sp)
			return true
		})
	case FormatASNOrgCC:
		err = eachCSV(data, p, 3, func(rec []string) bool {
			asn, ok := parseASN(rec[0])
			cc := strings.ToUpper(strings.TrimSpace(rec[2]))
			if !ok || cc != "" && !isCountry(cc) {
				return false
			}
			p.asns = append(p.asns, feedfile.ASN{ASN: asn, Name: strings.TrimSpace(rec[1]), Country: cc})
			return true
		})
	case FormatASNList:
		err = eachLine(data, p, func(line string) bool {
			f := strings.Fields(line)
			asn, ok := parseASN(f[0])
			if ok {
				p.asns = append(p.asns, feedfile.ASN{ASN: asn})
			}
			return ok
		})
	case FormatBadASNCSV:
		err = eachCSV(data, p, 1, func(rec []string) bool {
			asn, ok := parseASN(rec[0])
			if ok {
				name := ""
				if len(rec) > 1 {
					name = strings.TrimSpace(rec[1])
				}
				p.asns = append(p.asns, feedfile.ASN{ASN: asn, Name: name})
			}
			return ok
		})
	case FormatProviderASN:
		err = eachCSV(data, p, 3, func(rec []string) bool {
			asn, ok := parseASN(rec[0])
			prov := strings.ToLower(strings.TrimSpace(rec[1]))
			if !ok || prov == "" {
				return false
			}
			cc := ""
			if len(rec) > 4 && isCountry(strings.TrimSpace(rec[4])) {
				cc = strings.TrimSpace(rec[4])
			}
			p.asns = append(p.asns, feedfile.ASN{ASN: asn, Name: prov, Kind: strings.ToLower(strings.TrimSpace(rec[2])), Country: cc})
			return true
		})
	case FormatMobileASN:
		err = eachCSV(data, p, 4, func(rec []string) bool {
			asn, ok := parseASN(rec[0])
			name := strings.TrimSpace(rec[1])
			if !ok || name == "" {
				return false
			}
			cc := strings.TrimSpace(rec[2])
			if !isCountry(cc) {
				cc = ""
			}
			p.asns = append(p.asns, feedfile.ASN{ASN: asn, Name: name, Kind: strings.ToLower(strings.TrimSpace(rec[3])), Country: cc})
			return true
		})
	case FormatDomains:
		err = eachLine(data, p, func(line string) bool {
			d, ok := cleanDomain(line)
			if ok {
				p.domains = append(p.domains, d)
			}
			return ok
		})
	case FormatZoneTab:
		err = eachLine(data, p, func(line string) bool {
			f := strings.Split(line, "\t")
			if len(f) < 3 {
				return false
			}
			// zone1970.tab lists every country that uses the zone
			// (CH,DE,LI Europe/Zurich): all of them match it.
			ccs := strings.Split(f[0], ",")
			cc, ok := zoneCountries(ccs[0], ccs[1:])
			if !ok || !isZoneName(f[2]) {
				return false
			}
			p.zones = append(p.zones, feedfile.Zone{Name: f[2], Country: cc})
			return true
		})
	case FormatTzCountry:
		// countries_1970 (the third column) lists every country that uses
		// the zone or, for a backward name, its target: all of them match.
		err = eachCSV(data, p, 2, func(rec []string) bool {
			name := strings.TrimSpace(rec[0])
			var also []string
			if len(rec) > 2 {
				also = strings.Fields(rec[2])
			}
			cc, ok := zoneCountries(strings.TrimSpace(rec[1]), also)
			if !isZoneName(name) || !ok {
				return false
			}
			p.zones = append(p.zones, feedfile.Zone{Name: name, Country: cc})
			return true
		})
	case FormatIP2ASN:
		// AS 0 marks space announced by nobody ("Not routed"): no row.
		err = eachTSV(data, p, func(line string) bool {
			f := strings.Split(line, "\t")
			if len(f) < 3 {
				return false
			}
			asn, aerr := strconv.ParseUint(strings.TrimSpace(f[2]), 10, 32)
			sp, ok := csvRange(f[0], f[1])
			if !ok || aerr != nil {
				return false
			}
			if asn != 0 {
				sp.value = uint32(asn)
				p.spans = append(p.spans, sp)
			}
			return true
		})
	case FormatIP2ASNInfo:
		// One row per range: the first row of an AS names it (SortASNs
		// keeps the first). The country is where the AS is registered.
		err = eachTSV(data, p, func(line string) bool {
			f := strings.Split(line, "\t")
			if len(f) < 5 {
				return false
			}
			asn, aerr := strconv.ParseUint(strings.TrimSpace(f[2]), 10, 32)
			if aerr != nil {
				return false
			}
			if asn == 0 {
				return true
			}
			cc := strings.ToUpper(strings.TrimSpace(f[3]))
			if !isCountry(cc) {
				cc = ""
			}
			p.asns = append(p.asns, feedfile.ASN{ASN: uint32(asn), Name: strings.TrimSpace(f[4]), Country: cc})
			return true
		})
	default:
		return nil, fmt.Errorf("unknown input format %q", format)
	}
	if err != nil {
		return nil, err
	}
	if p.entries() == 0 && p.skipped > 0 {
		return nil, fmt.Errorf("%w (%d unreadable lines)", errNothing, p.skipped)
	}
	return p, nil
}

// eachLine calls fn for every non-blank, non-comment line with any trailing
// "# comment" removed. fn reports whether it could read the line.
func eachLine(data []byte, p *parsed, fn func(string) bool) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !fn(line) {
			p.skipped++
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading lines: %w", err)
	}
	return nil
}

// eachTSV calls fn for every non-blank line. Unlike eachLine it keeps '#':
// organisation names may hold one.
func eachTSV(data []byte, p *parsed, fn func(string) bool) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if !fn(line) {
			p.skipped++
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading lines: %w", err)
	}
	return nil
}

// eachCSV calls fn for every record with at least minFields fields. A first
// record that does not read (a header) is not counted as skipped.
//
// Each physical line is one record (splitCSVLine): none of the feeds' CSV
// files quote a line break, and encoding/csv's lazy quotes let one stray
// quote (a `"name" ` with a space after it, as brianhama's bad-ASN list
// has) swallow the lines after it into a field, dropping them unseen.
func eachCSV(data []byte, p *parsed, minFields int, fn func([]string) bool) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	first := true
	var rec []string
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " \t\r")
		if strings.TrimSpace(line) == "" || line[0] == '#' {
			continue
		}
		rec = splitCSVLine(line, rec[:0])
		ok := len(rec) >= minFields && fn(rec)
		if !ok && !first {
			p.skipped++
		}
		first = false
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading CSV: %w", err)
	}
	return nil
}

// splitCSVLine splits one CSV line into fields, appended to dst: RFC 4180
// quoting ("" is a quote inside a quoted field), leading spaces of a field
// dropped, and a quote that neither closes a field nor doubles read as a
// plain character, as encoding/csv's LazyQuotes does.
func splitCSVLine(line string, dst []string) []string {
	for {
		line = strings.TrimLeft(line, " \t")
		if !strings.HasPrefix(line, `"`) {
			i := strings.IndexByte(line, ',')
			if i < 0 {
				return append(dst, line)
			}
			dst = append(dst, line[:i])
			line = line[i+1:]
			continue
		}
		field, rest, more := quotedField(line[1:])
		dst = append(dst, field)
		if !more {
			return dst
		}
		line = rest
	}
}

// quotedField reads a quoted field from just after its opening quote: the
// field, what follows the comma after its closing quote, and whether there
// was such a comma. A field never closed takes the rest of the line.
func quotedField(s string) (field, rest string, more bool) {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			b.WriteString(s)
			return b.String(), "", false
		}
		b.WriteString(s[:i])
		s = s[i+1:]
		switch {
		case s == "":
			return b.String(), "", false
		case s[0] == ',':
			return b.String(), s[1:], true
		case s[0] == '"':
			b.WriteByte('"')
			s = s[1:]
		default:
			b.WriteByte('"') // a stray quote inside the field
		}
	}
}

// parseAddrOrRange reads "1.2.3.4", "1.2.3.0/24", "2001:db8::/32" or
// "1.2.3.4-1.2.3.9". Prefixes are masked (a list's "1.2.3.4/24" means the
// block); IPv4-mapped forms are read as IPv4. A block wider than an IPv4
// /8 or an IPv6 /16 is refused: no list names one (the widest seen is a
// /9), and a garbled "0.0.0.0/1" would mark half the Internet.
func parseAddrOrRange(s string) (span, bool) {
	sp, ok := parseAddrOrRangeAny(s)
	if !ok || tooWide(sp) {
		return span{}, false
	}
	return sp, true
}

// tooWide: sp covers more than an IPv4 /8 or an IPv6 /16.
func tooWide(sp span) bool {
	if sp.v4 {
		return sp.hi.Lo-sp.lo.Lo >= 1<<24
	}
	d := sp.hi.Hi - sp.lo.Hi
	if sp.hi.Lo < sp.lo.Lo {
		d-- // borrow
	}
	return d >= 1<<48
}

func parseAddrOrRangeAny(s string) (span, bool) {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		pf, err := netip.ParsePrefix(s)
		if err != nil {
			return span{}, false
		}
		if pf.Addr().Is4In6() && pf.Bits() >= 96 {
			pf = netip.PrefixFrom(pf.Addr().Unmap(), pf.Bits()-96)
		}
		return spanOfPrefix(pf), true
	}
	if i := strings.IndexByte(s, '-'); i >= 0 {
		lo, err1 := netip.ParseAddr(strings.TrimSpace(s[:i]))
		hi, err2 := netip.ParseAddr(strings.TrimSpace(s[i+1:]))
		if err1 != nil || err2 != nil {
			return span{}, false
		}
		return spanOfRange(lo, hi)
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return span{}, false
	}
	a = a.Unmap()
	return spanOfPrefix(netip.PrefixFrom(a, a.BitLen())), true
}

func csvRange(a, b string) (span, bool) {
	lo, err1 := netip.ParseAddr(strings.TrimSpace(a))
	hi, err2 := netip.ParseAddr(strings.TrimSpace(b))
	if err1 != nil || err2 != nil {
		return span{}, false
	}
	return spanOfRange(lo, hi)
}

func parseASN(s string) (uint32, bool) {
	s = strings.TrimSpace(s)
	if len(s) > 2 && (s[:2] == "AS" || s[:2] == "as") {
		s = s[2:]
	}
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil && n > 0
}

func isCountry(s string) bool {
	return len(s) == 2 && 'A' <= s[0] && s[0] <= 'Z' && 'A' <= s[1] && s[1] <= 'Z'
}

// zoneCountries is a zone row's Country (feedfile.Zone): the zone's own
// country, then the other countries that use it, sorted, space-separated
// ("CH DE LI"). False when a code is not a country.
func zoneCountries(own string, also []string) (string, bool) {
	if !isCountry(own) {
		return "", false
	}
	var others []string
	for _, cc := range also {
		cc = strings.TrimSpace(cc)
		if !isCountry(cc) {
			return "", false
		}
		if cc != own {
			others = append(others, cc)
		}
	}
	slices.Sort(others)
	return strings.Join(append([]string{own}, slices.Compact(others)...), " "), true
}

func isZoneName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("/_-+", c) >= 0) {
			return false
		}
	}
	return true
}

// cleanDomain lower-cases a listed domain and rejects anything that is not a
// plausible host name (lists sometimes carry stray words or e-mail addresses).
func cleanDomain(s string) (string, bool) {
	s = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), ".")
	if len(s) < 3 || len(s) > 253 || strings.IndexByte(s, '.') <= 0 {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return "", false
		}
	}
	return s, true
}

// onionoo is the part of an Onionoo details document we read.
type onionoo struct {
	RelaysPublished string `json:"relays_published"`
	Relays          []struct {
		OrAddresses   []string `json:"or_addresses"`
		ExitAddresses []string `json:"exit_addresses"`
	} `json:"relays"`
}

// parseOnionoo takes every relay's exit addresses and the addresses of its
// OR ports: exits often leave from the OR address, and the exit_addresses
// field lists only addresses seen differing from it.
func parseOnionoo(data []byte, p *parsed) error {
	var doc onionoo
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("reading Onionoo JSON: %w", err)
	}
	if t, err := time.Parse("2006-01-02 15:04:05", doc.RelaysPublished); err == nil {
		p.date = t.Format(time.DateOnly)
	}
	add := func(s string) {
		a, err := ipaddr.ParseLoose(s)
		if err != nil || !ipaddr.IsPublic(a) {
			p.skipped++
			return
		}
		p.spans = append(p.spans, spanOfPrefix(netip.PrefixFrom(a, a.BitLen())))
	}
	for _, r := range doc.Relays {
		for _, s := range r.OrAddresses {
			add(s)
		}
		for _, s := range r.ExitAddresses {
			add(s)
		}
	}
	return nil
}

var (
	isoDateRe  = regexp.MustCompile(`(?:^|[^0-9])(20\d\d-[01]\d-[0-3]\d)(?:[^0-9]|$)`)
	lastUpdRe  = regexp.MustCompile(`(?i)last[ _-]?update[sd]?\s*:?\s*(.+)$`)
	headerScan = 4096
)

// headerDate finds a "Last update: …" line in the comment header of a text
// file (ipsum, fakefilter, the T-Mobile geofeed copy) and returns its date as
// YYYY-MM-DD, or "".
func headerDate(data []byte) string {
	head := data[:min(len(data), headerScan)]
	for _, line := range strings.Split(string(head), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "#") {
			continue
		}
		m := lastUpdRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v := strings.TrimSpace(m[1])
		if m := isoDateRe.FindStringSubmatch(v); m != nil {
			return m[1]
		}
		for _, layout := range []string{time.RFC1123Z, time.RFC1123, time.RFC850, time.ANSIC} {
			if t, err := time.Parse(layout, v); err == nil {
				return t.UTC().Format(time.DateOnly)
			}
		}
	}
	return ""
}

// nameDate returns a YYYY-MM-DD date found in a file name, or "".
func nameDate(name string) string {
	if m := isoDateRe.FindStringSubmatch(name); m != nil {
		return m[1]
	}
	return ""
}
