package netlists

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// TestClassifyBeyondTheLists covers the AS rules on named addresses of the
// embedded feeds.
func TestClassifyBeyondTheLists(t *testing.T) {
	s := embeddedSnapshot(t)
	cases := []struct {
		addr    string
		why     string
		vpn     bool
		service string
		dc      bool
		sources Source // exactly these
	}{
		// PacketHub (NordVPN) AS272096: in no range list at all, and on no
		// list by number either; found as another AS of PacketHub S.A.
		{"94.156.29.5", "PacketHub AS272096 outside every list", true, "NordVPN", false, SourceVPNASN},
		// AS141039 is on the X4B datacenter AS list; NordVPN through its
		// organisation, datacenter through the list and its share.
		{"2.59.157.5", "PacketHub AS141039", true, "NordVPN", true, SourceVPNASN | SourceDatacenterASN | SourceHostingShare | SourceDatacenterRanges},
		// Mullvad's own AS, and 31173 Services AB's other AS.
		{"45.92.0.5", "Mullvad VPN AB AS216025", true, "Mullvad", false, SourceVPNASN},
		{"141.11.20.5", "31173 Services AB AS49399", true, "Mullvad", false, SourceVPNASN},
		// A hosting network on no list, found by its hosting share (22%).
		{"2.26.170.1", "Evolus IT AS216416", false, "", true, SourceHostingShare},
		// Latitude.sh and Nexeon: the range lists cover under 1% of their
		// space, so the share cannot find them; the curated list does.
		{"2.57.168.5", "Latitude.sh AS396356", false, "", true, SourceHostingASN},
		{"23.94.12.5", "Nexeon AS20278", false, "", true, SourceHostingASN},
		// In the /24 of a listed PIA range (31.171.155.134/31), in a hosting
		// network: VPN with PIA's label.
		{"31.171.155.1", "PIA /24 neighbour", true, "Private Internet Access", true, SourceVPNNeighbour | SourceDatacenterRanges | SourceDatacenterASN | SourceHostingShare},
		// Next to Mullvad's 23.144.160.67, but AS32727 is no hosting
		// network: nothing.
		{"23.144.160.1", "Mullvad /24 in a non-hosting AS", false, "", false, 0},
		// Consumer and mobile networks: nothing.
		{"73.0.0.1", "Comcast", false, "", false, 0},
		{"80.128.0.1", "Deutsche Telekom", false, "", false, 0},
		{"172.32.0.1", "T-Mobile US", false, "", false, 0},
	}
	for _, tc := range cases {
		c := s.Classify(netip.MustParseAddr(tc.addr))
		if c.VPN != tc.vpn || c.VPNService != tc.service || c.Datacenter != tc.dc || c.Sources != tc.sources ||
			c.Tor || c.PrivacyRelay || c.OpenProxy {
			t.Errorf("%s (%s): VPN %v %q, datacenter %v, sources %012b; want %v %q, %v, %012b",
				tc.addr, tc.why, c.VPN, c.VPNService, c.Datacenter, c.Sources, tc.vpn, tc.service, tc.dc, tc.sources)
		}
		if tc.vpn && c.Service != tc.service {
			t.Errorf("%s: service %q, want %q", tc.addr, c.Service, tc.service)
		}
	}
}

// TestVPNListASNsThatAreNotVPNs: the X4B VPN AS list also names general
// hosts (M247, Datacamp, Peace Communications) and Tor operators (Stiftung
// Erneuerbare Freiheit; Unredacted runs exits): none of them becomes VPN.
func TestVPNListASNsThatAreNotVPNs(t *testing.T) {
	s := embeddedSnapshot(t)
	for _, asn := range []uint32{9009, 212238, 20448, 60729, 401401, 401720} {
		for i := range s.asnRows {
			if r := &s.asnRows[i]; r.asn == asn && r.vpn != "" {
				t.Errorf("AS%d %q reads as VPN %q", asn, r.org, r.vpn)
			}
		}
	}
	// And the operators they list by number are kept.
	for _, asn := range []uint32{136787, 207137, 141039, 147049, 272096, 209854, 208172} {
		found := false
		for i := range s.asnRows {
			if r := &s.asnRows[i]; r.asn == asn {
				found = r.vpn != ""
			}
		}
		if !found {
			t.Errorf("AS%d is not read as a VPN operator", asn)
		}
	}
}

// TestOpenProxyListBeatsASRules: the AS rules come after every list, the
// open proxy list included, so an address on it inside a VPN operator's
// network or next to a listed VPN range reads as an open proxy (block), not
// as a VPN (review) found by the AS.
func TestOpenProxyListBeatsASRules(t *testing.T) {
	var files []*feedfile.File
	for _, name := range FeedNames {
		f, err := ReadFeed("", name)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	// 94.156.29.5: PacketHub (NordVPN) by its AS; 31.171.155.1: in the /24
	// of a PIA range in a hosting network (see TestClassifyBeyondTheLists).
	proxies := []uint32{94<<24 | 156<<16 | 29<<8 | 5, 31<<24 | 171<<16 | 155<<8 | 1}
	slices.Sort(proxies)
	for i, f := range files {
		if f.Name == FeedProxy {
			files[i] = &feedfile.File{
				Header: feedfile.Header{Name: FeedProxy, Kind: feedfile.KindRanges, Date: f.Date, Entries: len(proxies)},
				Ranges: feedfile.Ranges{V4: feedfile.Table4{Start: proxies, End: proxies, Val: make([]uint32, len(proxies))}},
			}
		}
	}
	s, err := FromFiles(files)
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"94.156.29.5", "31.171.155.1"} {
		c := s.Classify(netip.MustParseAddr(addr))
		if !c.OpenProxy || c.VPN || c.Sources&SourceOpenProxy == 0 || c.Sources&(SourceVPNASN|SourceVPNNeighbour) != 0 {
			t.Errorf("%s on the open proxy list: proxy %v, VPN %v %q, sources %012b", addr, c.OpenProxy, c.VPN, c.VPNService, c.Sources)
		}
	}
}
