package checks

import (
	"strconv"

	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/nettoken"
	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/wire"
)

// Sources of the evidence array that are not feeds.
const (
	evNetworkToken = "network_token" // the browser's own report (WebRTC, proxy headers)
	evTestToken    = "test_token"
	evSample       = "sample"
)

// maxNetEvidence bounds the evidence array: one entry per source that can
// fire at once, plus the token's proxy evidence.
const maxNetEvidence = 12

// networkEvidence appends why each flag of n was set: the feed sources of
// the classification of the measured address, and the token's own proxy
// evidence. Nothing is appended when no flag is set.
func networkEvidence(dst []wire.NetworkEvidence, n *score.Network, f *nettoken.Facts, snap *netlists.Snapshot) []wire.NetworkEvidence {
	if n.Degraded || !(n.VPN || n.Proxy || n.PrivacyRelay || n.OpenProxy || n.Datacenter || n.Tor) {
		return dst
	}
	c := snap.Classify(n.IP)
	c.Sources.Each(func(src netlists.Source) {
		e := wire.NetworkEvidence{Flag: src.Flag(), Source: src.Name(), Listed: snap.Listed(src)}
		switch src {
		case netlists.SourceVPNProviders, netlists.SourceVPNRanges, netlists.SourceVPNNeighbour:
			e.Detail = c.VPNService
		case netlists.SourceVPNASN:
			e.Detail = asDetail(c.ASN, c.VPNService)
		case netlists.SourceCloudRanges:
			e.Detail = c.Cloud
		case netlists.SourceDatacenterASN, netlists.SourceHostingASN:
			e.Detail = asDetail(c.ASN, c.Org)
		case netlists.SourceHostingShare:
			e.Detail = asDetail(c.ASN, strconv.Itoa(int(c.HostingShare)/100)+"%")
		}
		dst = append(dst, e)
	})
	if n.Proxy && !c.Anonymous() && f != nil {
		detail := "webrtc_mismatch"
		if f.Headers != 0 {
			detail = "proxy_headers"
		}
		dst = append(dst, wire.NetworkEvidence{Flag: netlists.FlagProxy, Source: evNetworkToken, Detail: detail})
	}
	return dst
}

func asDetail(asn uint32, what string) string {
	b := strconv.AppendUint(append(make([]byte, 0, 32), "AS"...), uint64(asn), 10)
	if what != "" {
		b = append(append(b, ' '), what...)
	}
	return string(b)
}

// fixedEvidence lists the flags of a test token or sample answer, each
// explained by that fixed source.
func fixedEvidence(dst []wire.NetworkEvidence, r *wire.Evaluate, source string) []wire.NetworkEvidence {
	n := &r.Network
	for _, f := range []struct {
		set  bool
		flag string
	}{
		{n.Tor, netlists.FlagTor}, {n.PrivacyRelay, netlists.FlagPrivacyRelay}, {n.VPN, netlists.FlagVPN},
		{n.Proxy && !n.PrivacyRelay, netlists.FlagProxy}, {n.Datacenter, netlists.FlagDatacenter},
	} {
		if f.set {
			dst = append(dst, wire.NetworkEvidence{Flag: f.flag, Source: source})
		}
	}
	return dst
}
