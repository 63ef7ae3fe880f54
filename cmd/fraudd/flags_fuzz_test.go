package main

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzPrefixList: --trusted-proxies (the operator's) reads without a panic;
// every address an accepted entry names, as the service sees callers
// (unmapped), is inside what is kept, and what is kept reads back as itself.
func FuzzPrefixList(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8,192.0.2.7", " 2001:db8::/32 ", "::ffff:10.0.0.1", "::ffff:10.0.0.0/104", "fe80::1%eth0", "", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var p prefixList
		if p.Set(v) != nil {
			return
		}
		var again prefixList
		if err := again.Set(p.String()); err != nil || again.String() != p.String() {
			t.Fatalf("%q kept as %q, which reads back as %q, %v", v, p.String(), again.String(), err)
		}
		for i, part := range splitList(v) {
			var named netip.Addr
			if pr, err := netip.ParsePrefix(part); err == nil {
				named = pr.Masked().Addr()
			} else {
				named = netip.MustParseAddr(part).WithZone("")
			}
			if !p[i].Contains(named.Unmap()) {
				t.Fatalf("%q: entry %q kept as %v, which holds no caller at %v", v, part, p[i], named.Unmap())
			}
		}
	})
}

// FuzzClusterFlags: --cluster-etcd, --cluster-initial and the peer URLs read
// without a panic, and what --cluster-initial keeps reads back as itself.
func FuzzClusterFlags(f *testing.F) {
	for _, s := range []string{"n1=http://n1:2380,n2=http://n2:2380", "etcd1:2379,https://etcd2:2379/", "a=http://[::1]:1", "x=", "=http://h:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var l []string
		_ = endpointList{&l}.Set(v)
		_ = checkURL(v)
		var s string
		if (initialValue{&s}).Set(v) != nil {
			return
		}
		var again string
		if err := (initialValue{&again}).Set(s); err != nil || again != s {
			t.Fatalf("%q kept as %q, which reads back as %q, %v", v, s, again, err)
		}
		if strings.Count(s, "=") < len(splitList(s)) {
			t.Fatalf("%q kept as %q", v, s)
		}
	})
}
