package fastapi

import (
	"encoding/json"
	"testing"
)

// TestNetworkEvidenceGolden: a live evaluation that sets a network flag
// says why in evidence.network (additive), one entry per source; a clean
// one carries no array (evaluate_live_network.json). Lookups of a Tor exit
// and a cloud address name the list that decided.
func TestNetworkEvidenceGolden(t *testing.T) {
	e := newCollectEnv(t)
	pk, live := e.acct.PublishableKey, e.acct.LiveKey
	plain := `{"v":1,"key":"PK"}`
	for _, c := range []struct {
		name, remote, body string
		want               []string // sources, in order
	}{
		// PacketHub (NordVPN) AS272096, in no range list.
		{"vpn_asn", "94.156.29.5:40000", plain, []string{"asn"}},
		// Next to PIA's 31.171.155.134/31, in a hosting network.
		{"vpn_neighbour", "31.171.155.1:40000", plain, []string{"vpn_neighbour", "datacenter_ranges", "datacenter_asn", "asn_hosting_share"}},
		// A hosting network found by its share alone.
		{"hosting_share", "2.26.170.1:40000", plain, []string{"asn_hosting_share"}},
		{"tor", "102.130.113.9:40000", plain, []string{"tor_exits"}},
		// A residential address whose browser reports another network.
		{"webrtc_proxy", "73.0.0.1:40000", `{"v":1,"key":"PK","webrtc":{"status":"ok","addrs":["81.2.69.160"]}}`, []string{"network_token"}},
	} {
		tok := e.token(t, pk, c.remote, nil, c.body)
		st, _, raw := e.evaluate(t, live, map[string]any{"token": tok})
		if st != 200 {
			t.Fatalf("%s: %d %s", c.name, st, raw)
		}
		var m struct {
			Evidence struct {
				Network []struct{ Flag, Source, Detail, Listed string } `json:"network"`
			} `json:"evidence"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ev := range m.Evidence.Network {
			got = append(got, ev.Source)
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: sources %v, want %v", c.name, got, c.want)
		} else {
			for i := range got {
				if got[i] != c.want[i] {
					t.Errorf("%s: sources %v, want %v", c.name, got, c.want)
				}
			}
		}
		golden(t, "evaluate_live_evidence_"+c.name, raw)
	}
	for _, c := range []struct{ name, addr string }{{"tor", "102.130.113.9"}, {"cloud", "1.178.1.1"}, {"clean", "73.0.0.1"}} {
		ctx := e.call("GET", "/v1/lookup/"+c.addr, "203.0.113.50:1000", map[string]string{"Authorization": "Bearer " + live}, "")
		if ctx.Response.StatusCode() != 200 {
			t.Fatalf("lookup %s: %d %s", c.addr, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		golden(t, "lookup_evidence_"+c.name, normalise(ctx.Response.Body()))
	}
}
