package nettoken

import (
	"net/netip"
	"time"

	"github.com/fraudd/fraudd/intel/ipaddr"
	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/score"
)

// Network turns verified facts into the network layer of an evaluation.
//
//   - Measured: the observed address is public and not the service's own
//     proxy. Otherwise the reading failed: sdk_blocked is true, complete is
//     false and no flag is set (there is nothing to classify). The answer is
//     still a live one, not degraded: a token did arrive (SPEC 2.2).
//   - Every flag comes from the intel snapshot's classification of the
//     observed address: Tor, privacy relay, VPN (its provider label becomes
//     network.service), open proxy, datacenter/cloud, blocklisted, mobile,
//     and the country.
//   - complete is true when the address was measured and the browser's
//     report arrived with it. A WebRTC step that could not run does not make
//     the reading partial: WebRTC is extra evidence, not the measurement.
//
// Proxy evidence from the browser. Two observations say that the HTTP
// request was relayed by something between the browser and us:
//
//  1. WebRTC disagreement: a public candidate address the browser gathered
//     (host or server-reflexive) of the same family as the HTTP address but
//     outside its network — another /24 for IPv4, another /64 for IPv6.
//     Within those the two are the same connection (carrier-grade NAT pools
//     and IPv6 privacy addresses rotate there), and an IPv4 candidate next to
//     an IPv6 HTTP address is ordinary dual stack, never evidence.
//  2. Proxy headers on the browser's request (Via, Forwarded, an untrusted
//     X-Forwarded-For, X-Proxy-ID and kin), which browsers never send
//     themselves.
//
// Either sets network.proxy (reason proxy_detected, decision block per SPEC
// 2.8.1) — unless the HTTP address is already a known anonymiser (Tor, privacy
// relay, VPN, open proxy). There the disagreement is exactly what that layer
// does, it is already flagged, and adding "proxy" would turn a privacy relay
// or VPN (review) into a block for the same fact.
func Network(f *Facts, snap *netlists.Snapshot) score.Network {
	var n score.Network
	a := f.Addr.Unmap()
	if a.IsValid() {
		n.IP = a
	}
	if !a.IsValid() || f.Infra || !ipaddr.IsPublic(a) {
		n.SDKBlocked = true
		return n
	}
	c := snap.Classify(a)
	n.Tor, n.PrivacyRelay, n.VPN, n.OpenProxy = c.Tor, c.PrivacyRelay, c.VPN, c.OpenProxy
	n.Datacenter, n.Blocklisted, n.Mobile = c.Datacenter, c.Blocklisted, c.Mobile
	n.Service, n.Country = c.Service, c.Country
	n.Complete = f.Report
	if !c.Anonymous() && (f.Headers != 0 || WebRTCMismatch(f)) {
		n.Proxy = true
	}
	return n
}

// WebRTCMismatch reports whether a public WebRTC candidate of the HTTP
// address's family lies outside its /24 (IPv4) or /64 (IPv6).
func WebRTCMismatch(f *Facts) bool {
	a := f.Addr.Unmap()
	if !a.IsValid() {
		return false
	}
	bits := 24
	if a.Is6() {
		bits = 64
	}
	home, err := a.Prefix(bits)
	if err != nil {
		return false
	}
	for _, c := range f.Candidates[:min(int(f.NCand), MaxCandidates)] {
		c = c.Unmap()
		if c.Is4() == a.Is4() && !home.Contains(c) {
			return true
		}
	}
	return false
}

// Age is the whole seconds from the reading to now, never negative (a test
// clock may be moved backwards).
func Age(f *Facts, now time.Time) int64 {
	return max(int64(now.Sub(f.Issued)/time.Second), 0)
}

// IsPublic is the public-address test candidates are filtered with.
func IsPublic(a netip.Addr) bool { return ipaddr.IsPublic(a) }
