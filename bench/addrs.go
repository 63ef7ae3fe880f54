package bench

import (
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
)

// The address mix of the live scenarios. Prefixes and addresses were picked
// from the public sources the service's own feeds are built from (Tor exit
// lists, published cloud ranges, datacenter and VPN provider lists, Apple's
// relay egress, public proxy lists, the IP-to-ASN table for consumer ISPs),
// so each class exercises the classification path it names. A bench does not
// need them to stay exact: a stale Tor exit is still a realistic lookup.

// region is a block of addresses and the time zones its users report.
type region struct {
	prefix netip.Prefix
	zones  []string
}

// addrClass is one kind of visitor network.
type addrClass struct {
	name    string
	weight  float64 // share of live visitors
	regions []region
}

func pfx(s string, zones ...string) region {
	return region{prefix: netip.MustParsePrefix(s), zones: zones}
}

func hosts(zones []string, addrs ...string) []region {
	out := make([]region, len(addrs))
	for i, a := range addrs {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			ad := netip.MustParseAddr(a)
			p = netip.PrefixFrom(ad, ad.BitLen())
		}
		out[i] = region{prefix: p, zones: zones}
	}
	return out
}

var (
	usZones = []string{"America/New_York", "America/Chicago", "America/Denver", "America/Los_Angeles"}
	anyZone = []string{"Europe/Amsterdam", "America/New_York", "Europe/London", "Asia/Singapore", "Europe/Berlin", "America/Los_Angeles"}
)

// visitorClasses is the realistic mix: mostly residential and mobile, some
// cloud and hosting, commercial VPNs, Apple's relay, open proxies, Tor.
var visitorClasses = []addrClass{
	{name: "residential", weight: 62, regions: []region{
		pfx("73.0.0.0/8", usZones...),              // Comcast
		pfx("99.22.226.0/23", usZones...),          // AT&T
		pfx("93.192.0.0/10", "Europe/Berlin"),      // Deutsche Telekom
		pfx("86.128.0.0/10", "Europe/London"),      // BT
		pfx("90.0.0.0/11", "Europe/Paris"),         // Orange
		pfx("88.160.0.0/11", "Europe/Paris"),       // Free
		pfx("88.0.0.0/11", "Europe/Madrid"),        // Telefónica
		pfx("79.0.0.0/10", "Europe/Rome"),          // Telecom Italia
		pfx("94.64.0.0/13", "Europe/Athens"),       // OTE
		pfx("153.128.0.0/10", "Asia/Tokyo"),        // NTT
		pfx("175.224.0.0/12", "Asia/Seoul"),        // Korea Telecom
		pfx("115.208.0.0/13", "Asia/Shanghai"),     // Chinanet
		pfx("191.176.0.0/13", "America/Sao_Paulo"), // Claro
		pfx("14.200.0.0/14", "Australia/Sydney"),   // TPG
		pfx("112.200.0.0/13", "Asia/Manila"),       // PLDT
		pfx("2601::/20", usZones...),               // Comcast IPv6
		pfx("2003::/19", "Europe/Berlin"),          // Deutsche Telekom IPv6
	}},
	{name: "mobile", weight: 10, regions: []region{
		pfx("100.128.0.0/9", usZones...),     // T-Mobile US
		pfx("157.32.0.0/12", "Asia/Kolkata"), // Reliance Jio
	}},
	{name: "cloud", weight: 8, regions: []region{
		pfx("34.192.0.0/10", anyZone...),  // AWS
		pfx("44.192.0.0/10", anyZone...),  // AWS
		pfx("34.16.0.0/12", anyZone...),   // Google Cloud
		pfx("172.160.0.0/12", anyZone...), // Azure
		pfx("104.131.0.0/16", anyZone...), // DigitalOcean
		pfx("45.76.0.0/15", anyZone...),   // Vultr
		pfx("193.122.0.0/15", anyZone...), // Oracle
	}},
	{name: "datacenter", weight: 4, regions: []region{
		pfx("88.198.0.0/16", anyZone...),  // Hetzner
		pfx("78.46.0.0/15", anyZone...),   // Hetzner
		pfx("51.75.0.0/16", anyZone...),   // OVH
		pfx("46.4.0.0/16", anyZone...),    // Hetzner
		pfx("135.181.0.0/16", anyZone...), // Hetzner
	}},
	{name: "vpn", weight: 8, regions: hosts(anyZone,
		// Mullvad
		"170.62.100.170", "23.234.82.127", "149.88.104.2", "178.249.211.79", "149.102.246.15", "23.162.8.3",
		// Private Internet Access
		"37.19.210.92/31", "191.96.36.125", "95.181.235.11", "193.56.117.69", "173.239.247.160/30", "158.173.3.112/29",
		// Proton VPN
		"149.88.21.32/28", "103.214.20.99", "196.245.151.218", "193.148.18.84/30", "146.70.229.8/29", "169.150.254.168/30",
	)},
	{name: "privacy-relay", weight: 3, regions: hosts(anyZone,
		"104.28.36.8/29", "104.28.149.16/28", "104.28.83.240/30", "104.28.126.120/30", "172.225.163.88/29", "172.225.164.32/27",
	)},
	{name: "proxy", weight: 3, regions: hosts(anyZone,
		"103.162.54.182", "45.174.108.141", "103.174.122.79", "178.57.106.43", "109.68.189.22", "45.43.60.220",
		"89.145.145.34", "124.83.108.167", "64.64.152.248", "43.162.94.99", "196.1.182.158", "193.181.35.182",
	)},
	{name: "tor", weight: 2, regions: hosts(anyZone,
		"185.220.101.147", "104.192.3.74", "82.221.100.152", "23.129.64.152", "104.244.74.51", "204.8.96.80",
		"185.220.101.173", "103.193.179.22", "107.189.1.9", "104.244.75.74", "205.185.113.112", "23.191.200.78",
		"185.129.62.63", "107.189.10.175", "185.244.192.184", "192.42.116.94",
		"2001:67c:289c:4::132", "2001:620:20d0::24",
	)},
}

// Visitor is one sampled visitor network.
type Visitor struct {
	Class string
	Addr  netip.Addr
	// Zone is a time zone a browser on that network plausibly reports.
	Zone string
}

// sampleVisitor draws a visitor from the mix.
func sampleVisitor(r *rand.Rand) Visitor {
	total := 0.0
	for _, c := range visitorClasses {
		total += c.weight
	}
	x := r.Float64() * total
	c := visitorClasses[len(visitorClasses)-1]
	for _, cc := range visitorClasses {
		if x < cc.weight {
			c = cc
			break
		}
		x -= cc.weight
	}
	reg := c.regions[r.IntN(len(c.regions))]
	return Visitor{Class: c.name, Addr: randomIn(r, reg.prefix), Zone: reg.zones[r.IntN(len(reg.zones))]}
}

// randomIn picks an address in p, avoiding .0 and .255 in IPv4.
func randomIn(r *rand.Rand, p netip.Prefix) netip.Addr {
	p = p.Masked()
	a := p.Addr()
	if a.Is4() {
		host := 32 - p.Bits()
		if host == 0 {
			return a
		}
		b := a.As4()
		base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		v := base | (r.Uint32() & (1<<host - 1))
		if host >= 8 && (v&0xff == 0 || v&0xff == 0xff) {
			v = v&^0xff | 1
		}
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	host := 128 - p.Bits()
	b := a.As16()
	for i := 15; i >= 0 && host > 0; i-- {
		n := min(host, 8)
		b[i] |= byte(r.UintN(1 << n))
		host -= n
	}
	if b[15] == 0 {
		b[15] = 1
	}
	return netip.AddrFrom16(b)
}

// CallerPool hands out caller addresses for X-Forwarded-For, each used at
// most PerAddr times in turn, so per-address limits (free tools 12/minute,
// usage reads 120/minute, token exchanges 60/minute) never refuse the load.
// fraudd believes the header because fraudbench starts it with
// --trusted-proxies 127.0.0.0/8.
type CallerPool struct {
	base    uint32 // first address of the pool, IPv4
	size    uint32 // number of addresses
	perAddr uint64
	next    atomic.Uint64
}

// NewCallerPool is a pool over the IPv4 prefix p, starting at a random
// offset so that runs against a long-lived server do not reuse addresses.
func NewCallerPool(p netip.Prefix, perAddr int, r *rand.Rand) *CallerPool {
	p = p.Masked()
	b := p.Addr().As4()
	cp := &CallerPool{
		base:    uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]),
		size:    uint32(1) << (32 - p.Bits()),
		perAddr: uint64(max(perAddr, 1)),
	}
	if r != nil {
		cp.next.Store(uint64(r.Uint32N(cp.size)) * cp.perAddr)
	}
	return cp
}

// Next is the next caller address.
func (c *CallerPool) Next() netip.Addr {
	n := c.next.Add(1) - 1
	v := c.base + uint32((n/c.perAddr)%uint64(c.size))
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// Caller pools: a backend fleet (the customer's servers calling evaluate,
// lookup and usage) in the benchmarking range 198.18.0.0/15 (RFC 2544), and
// the public's browsers using the free tools in 10.0.0.0/8.
var (
	fleetPrefix  = netip.MustParsePrefix("198.18.0.0/24")
	publicPrefix = netip.MustParsePrefix("10.0.0.0/8")
)

// setXFF sets X-Forwarded-For to addr without allocating.
func setXFF(reqHeader interface{ SetBytesKV(k, v []byte) }, f *Filler, addr netip.Addr) {
	f.Buf = addr.AppendTo(f.Buf[:0])
	reqHeader.SetBytesKV(xffKey, f.Buf)
}

var xffKey = []byte("X-Forwarded-For")
