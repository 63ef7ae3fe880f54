package clusterserve

import (
	"strings"
	"testing"
)

// FuzzParseKey: configuration keys come from etcd, outside input. A key
// parses only to a known kind and a non-empty id without a slash, and the
// two put back together give the key.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"account/acc_1", "rules/acc_1", "pins/acc_1", "email/a@b.co", "account/", "account/a/b", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, k string) {
		kind, id, ok := parseKey(k)
		if !ok {
			return
		}
		if id == "" || strings.Contains(id, "/") || kind+id != k {
			t.Fatalf("%q parsed to %q %q", k, kind, id)
		}
		switch kind {
		case kindAccount, kindRules, kindPins:
		default:
			t.Fatalf("%q: kind %q", k, kind)
		}
	})
}
