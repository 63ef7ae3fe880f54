package score

import (
	"encoding/binary"
	"go/parser"
	"go/token"
	"math"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// House rules as tests (STYLE.md habit 8): one package doc, and no imports of
// this module outside intel/ (the engine must not depend on feeds, storage
// or the HTTP layer).
func TestHouseRules(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	docs := 0
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil && !strings.HasSuffix(name, "_test.go") {
			docs++
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "github.com/fraudd/fraudd/") && !strings.HasPrefix(path, "github.com/fraudd/fraudd/intel/") {
				t.Errorf("%s imports %s", name, path)
			}
			if !strings.HasSuffix(name, "_test.go") && strings.Contains(path, ".") {
				t.Errorf("%s imports third-party %s: the engine stays on the standard library", name, path)
			}
		}
	}
	if docs != 1 {
		t.Errorf("%d package doc comments, want exactly 1 (doc.go)", docs)
	}
}

// The reason codes are SPEC §2.7's, in its (alphabetical) order.
func TestReasonCodesAreSpec(t *testing.T) {
	spec := []string{"account_many_devices", "account_new_device", "anonymous_network", "antidetect_browser",
		"antidetect_profile_burst", "antidetect_randomization", "automation_detected", "datacenter_asn",
		"device_many_accounts", "disposable_email", "emulator_detected", "gpu_inconsistent",
		"high_activity_device", "ip_blocklisted", "ip_many_accounts", "multi_account_device", "privacy_relay",
		"private_browsing", "proxy_detected", "timezone_mismatch", "tor_exit_node", "virtual_machine",
		"vpn_detected"}
	var all ReasonSet = 1<<numReasons - 1
	if got := all.AppendStrings(nil); !slices.Equal(got, spec) || !slices.IsSorted(got) || NumReasons != len(spec) {
		t.Errorf("reason codes %v\nSPEC 2.7     %v", got, spec)
	}
	var seen []Reason
	for r := range all.All() {
		seen = append(seen, r)
	}
	if len(seen) != len(spec) || seen[0] != ReasonAccountManyDevices || seen[len(seen)-1] != ReasonVPNDetected {
		t.Errorf("All() yields %v", seen)
	}
	var sigs SignalSet = 1<<numSignals - 2
	var names []string
	for s := range sigs.All() {
		names = append(names, s.String())
	}
	if !slices.Equal(names, sigs.AppendStrings(nil)) || len(names) != NumSignals || sigs.Has(SignalNone) || sigs.Has(99) {
		t.Errorf("signal set iteration %v", names)
	}
	for range all.All() {
		break // early exit must be honoured
	}
}

// FuzzEvaluate: any input decides without panicking and keeps the answer's
// invariants. The bytes drive every field, including hostile floats.
func FuzzEvaluate(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f})
	f.Add([]byte("\x01\x02\x04\x08\x10\x20\x40\x80 rules and pins"))
	f.Fuzz(func(t *testing.T, data []byte) {
		get := func(n int) []byte {
			b := make([]byte, n)
			copy(b, data)
			data = data[min(n, len(data)):]
			return b
		}
		bits := binary.LittleEndian.Uint64(get(8))
		bit := func(i int) bool { return bits&(1<<i) != 0 }
		ts := math.Float64frombits(binary.LittleEndian.Uint64(get(8)))
		ipb := get(4)
		in := Input{
			Network: Network{Degraded: bit(0), VPN: bit(1), Proxy: bit(2), PrivacyRelay: bit(3), OpenProxy: bit(4),
				Datacenter: bit(5), Tor: bit(6), Anonymous: bit(7), Blocklisted: bit(8), Mobile: bit(9),
				IP: netip.AddrFrom4([4]byte(ipb)), Country: string(get(2))},
			Device: Device{Present: bit(10), Automation: bit(11), Antidetect: bit(12), Emulator: bit(13),
				VirtualMachine: bit(14), Incognito: bit(15), PrivacyMode: bit(16), IPBlocklisted: bit(17),
				HighActivity: bit(18), MultiAccount: bit(19), TamperingScore: ts, VisitorID: string(get(1))},
			Email:       Email{Sent: bit(20), Disposable: bit(21)},
			TimeZone:    TimeZone{Sent: bit(22), Zone: "Z", Country: string(get(2))},
			Account:     Account{DeviceAccounts24h: int(int8(get(1)[0])), AccountDevices24h: int(int8(get(1)[0])), IPAccounts24h: int(int8(get(1)[0])), NewDevice: bit(23)},
			Consistency: Consistency{GPUInconsistent: bit(24), AntidetectRandomization: bit(25), AntidetectProfileBurst: bit(26)},
		}
		for len(data) >= 3 {
			b := get(3)
			in.Policy.Rules = append(in.Policy.Rules, Rule{Signal: Signal(b[0]), Action: Action(b[1])})
			p := Pin{Action: Action(b[1] & 3), Label: "l"}
			if b[2]&1 == 0 {
				p.Prefix = netip.PrefixFrom(in.Network.IP, int(b[2]>>1))
			} else {
				p.VisitorID = in.Device.VisitorID
			}
			in.Policy.Pins = append(in.Policy.Pins, p)
		}
		var r Result
		Evaluate(&in, &r)
		if r.RiskScore < 0 || r.RiskScore > 100 || !r.Decision.Valid() || !r.EngineDecision.Valid() ||
			r.PolicyChanged != (r.Decision != r.EngineDecision) {
			t.Fatalf("bad answer %s", describe(r))
		}
		_ = r.AppendExceptions(nil)
		_, _ = ThreatType(&r)
	})
}
