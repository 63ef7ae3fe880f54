package ipaddr

import (
	"errors"
	"net/netip"
	"testing"
)

func TestParseLoose(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" means an error is expected
	}{
		{"1.2.3.4", "1.2.3.4"},
		{"  1.2.3.4\t\n", "1.2.3.4"},
		{"1.2.3.4:80", "1.2.3.4"},
		{"1.2.3.4:65535", "1.2.3.4"},
		{"2606:4700::1111", "2606:4700::1111"},
		{"[2606:4700::1111]", "2606:4700::1111"},
		{"[2606:4700::1111]:443", "2606:4700::1111"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"2606:4700:0000:0000:0000:0000:0000:1111", "2606:4700::1111"},
		{"2606:4700::ABCD", "2606:4700::abcd"},
		{"https://1.2.3.4:8080/path", "1.2.3.4"},
		{"https://1.2.3.4", "1.2.3.4"},
		{"http://1.2.3.4/", "1.2.3.4"},
		{"http://user:pw@1.2.3.4:8080/x?y#z", "1.2.3.4"},
		{"http://[2606:4700::1111]/", "2606:4700::1111"},
		{"https://[2606:4700::1111]:8443/a/b", "2606:4700::1111"},
		{"socks5://8.8.8.8:1080", "8.8.8.8"},
		{"１．２．３．４", "1.2.3.4"},
		{"１。２。３。４", "1.2.3.4"},
		{"１．２．３．４：８０", "1.2.3.4"},
		{"［２６０６：４７００：：１１１１］：４４３", "2606:4700::1111"},
		{"２６０６：４７００：：ａｂｃＤ", "2606:4700::abcd"},
		{"\u3000１．２．３．４\u3000", "1.2.3.4"},
		{"::ffff:1.2.3.4", "1.2.3.4"},
		{"[::ffff:1.2.3.4]:80", "1.2.3.4"},
		{"::ffff:0102:0304", "1.2.3.4"},
		{"::1", "::1"},
		{"0.0.0.0", "0.0.0.0"},

		{"", ""},
		{"   ", ""},
		{"fe80::1%eth0", ""},
		{"[fe80::1%eth0]:80", ""},
		{"http://[fe80::1%25eth0]/", ""},
		{"1.2.3", ""},
		{"1.2.3.4.5", ""},
		{"01.2.3.4", ""},
		{"256.1.1.1", ""},
		{"1.2.3.4:", ""},
		{"1.2.3.4:65536", ""},
		{"1.2.3.4:8o", ""},
		{"1.2.3.4/24", ""},
		{"[1.2.3.4]:80", ""},
		{"[2606:4700::1111", ""},
		{"[2606:4700::1111]x", ""},
		{"[2606:4700::1111]:", ""},
		{"2606:4700::1111:443:1:2:3:4", ""},
		{"https://", ""},
		{"://1.2.3.4", ""},
		{"ht tp://1.2.3.4", ""},
		{"example.com", ""},
		{"https://example.com/", ""},
		{"1.2.3.4 5", ""},
		{"1.2.3.４x", ""},
		{"1.2.3.4\u00e9", ""},
	}
	for _, tt := range tests {
		got, err := ParseLoose(tt.in)
		if tt.want == "" {
			if err == nil {
				t.Errorf("ParseLoose(%q) = %v, want error", tt.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseLoose(%q) error %v, want %s", tt.in, err, tt.want)
			continue
		}
		if got.String() != tt.want {
			t.Errorf("ParseLoose(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestParseLooseZoneError(t *testing.T) {
	if _, err := ParseLoose("fe80::1%eth0"); !errors.Is(err, ErrZone) {
		t.Fatalf("err = %v, want ErrZone", err)
	}
	if _, err := ParseLoose("nonsense"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
}

func TestParseStrict(t *testing.T) {
	tests := []struct {
		in     string
		want   string
		mapped bool
		ok     bool
	}{
		{"1.2.3.4", "1.2.3.4", false, true},
		{"2606:4700::1111", "2606:4700::1111", false, true},
		{"::ffff:1.2.3.4", "::ffff:1.2.3.4", true, true},
		{"::ffff:8.8.8.8", "::ffff:8.8.8.8", true, true},
		{"1.2.3.4:80", "", false, false},
		{"[2606:4700::1111]", "", false, false},
		{" 1.2.3.4", "", false, false},
		{"https://1.2.3.4/", "", false, false},
		{"fe80::1%eth0", "", false, false},
		{"１．２．３．４", "", false, false},
		{"", "", false, false},
	}
	for _, tt := range tests {
		a, mapped, err := ParseStrict(tt.in)
		if !tt.ok {
			if err == nil {
				t.Errorf("ParseStrict(%q) = %v, want error", tt.in, a)
			}
			continue
		}
		if err != nil || a.String() != tt.want || mapped != tt.mapped {
			t.Errorf("ParseStrict(%q) = %v, %v, %v; want %s, %v", tt.in, a, mapped, err, tt.want, tt.mapped)
		}
		if mapped && IsPublic(a) {
			t.Errorf("IsPublic(%v) = true for a mapped address", a)
		}
	}
}

func TestIsPublic(t *testing.T) {
	public := []string{
		"1.1.1.1", "8.8.8.8", "73.0.0.1", "100.63.255.255", "100.128.0.0",
		"172.15.255.255", "172.32.0.0", "192.0.0.9", "192.0.0.10", "192.0.1.1",
		"192.31.196.1", "192.52.193.1", "192.88.98.255", "192.175.48.1", "198.17.255.255", "198.20.0.0",
		"223.255.255.255", "2606:4700::1111", "2001:4860:4860::8888", "2001:200::1",
		"2001:3::1", "2001:4:112::1", "2001:20::1", "2001:30::1", "2001:1::1", "2001:1::3",
		"2620:4f:8000::1", "3ffe::1", "3fff:1000::1", "2003::1",
	}
	private := []string{
		"0.0.0.0", "0.1.2.3", "10.1.2.3", "100.64.0.1", "100.127.255.255", "127.0.0.1",
		"169.254.1.1", "172.16.0.1", "172.31.255.255", "192.0.0.1", "192.0.0.8", "192.0.0.170", "192.0.2.1",
		"192.88.99.1", "192.168.1.1", "198.18.0.1", "198.19.255.255", "198.51.100.7", "203.0.113.9",
		"224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255",
		"::", "::1", "::ffff:1.2.3.4", "::ffff:8.8.8.8", "64:ff9b::808:808", "64:ff9b:1::1", "100::1",
		"2001::1", "2001:1::4", "2001:2::1", "2001:10::1", "2001:1ff:ffff::1", "2001:db8::1", "2001:db8:ffff::1",
		"2002:c000:204::1", "3fff::1", "3fff:fff::1", "5f00::1", "fc00::1", "fd12::1", "fe80::1",
		"ff02::1", "4000::1", "1000::1",
	}
	for _, s := range public {
		if !IsPublic(netip.MustParseAddr(s)) {
			t.Errorf("IsPublic(%s) = false, want true", s)
		}
	}
	for _, s := range private {
		if IsPublic(netip.MustParseAddr(s)) {
			t.Errorf("IsPublic(%s) = true, want false", s)
		}
	}
	if IsPublic(netip.Addr{}) {
		t.Error("IsPublic(zero) = true")
	}
	if IsPublic(netip.MustParseAddr("2606:4700::1111%eth0")) {
		t.Error("IsPublic(zoned) = true")
	}
}

func TestPrefix64(t *testing.T) {
	a := Prefix64(netip.MustParseAddr("2001:4860:4860:1:2:3:4:5"))
	b := Prefix64(netip.MustParseAddr("2001:4860:4860:1::ffff"))
	if a != b || a.String() != "2001:4860:4860:1::/64" {
		t.Fatalf("Prefix64 = %v, %v", a, b)
	}
	if p := Prefix64(netip.MustParseAddr("1.2.3.4")); p.String() != "1.2.3.4/32" {
		t.Fatalf("Prefix64(v4) = %v", p)
	}
	if p := Prefix64(netip.MustParseAddr("::ffff:1.2.3.4")); p.String() != "1.2.3.4/32" {
		t.Fatalf("Prefix64(mapped) = %v", p)
	}
	if p := Prefix64(netip.Addr{}); p.IsValid() {
		t.Fatalf("Prefix64(zero) = %v", p)
	}
}

func TestZeroAllocs(t *testing.T) {
	v4 := netip.MustParseAddr("8.8.8.8")
	v6 := netip.MustParseAddr("2001:db8::1")
	n := testing.AllocsPerRun(1000, func() {
		_ = IsPublic(v4)
		_ = IsPublic(v6)
		_ = Prefix64(v6)
	})
	if n != 0 {
		t.Fatalf("IsPublic/Prefix64 allocate %v times per run", n)
	}
	n = testing.AllocsPerRun(1000, func() {
		_, _ = ParseLoose("https://1.2.3.4:8080/path")
		_, _ = ParseLoose("[2606:4700::1111]:443")
	})
	if n != 0 {
		t.Fatalf("ParseLoose on ASCII input allocates %v times per run", n)
	}
}

func BenchmarkParseLoose(b *testing.B) {
	in := []string{"1.2.3.4", "[2606:4700::1111]:443", "https://1.2.3.4:8080/path", "１．２．３．４"}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_, _ = ParseLoose(in[i%len(in)])
	}
}

func BenchmarkIsPublic(b *testing.B) {
	a := []netip.Addr{netip.MustParseAddr("73.0.0.1"), netip.MustParseAddr("2606:4700::1111")}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = IsPublic(a[i&1])
	}
}
