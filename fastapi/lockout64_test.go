package fastapi

import "testing"

// TestIPv6LockoutHoldsTheHostNotItsLAN: one host's twenty bad keys lock out
// that host; a neighbour on the same /64 (a shared SLAAC LAN) with a valid
// key is not refused, until the /64 as a whole reaches its larger figure
// (CLARIFICATIONS "Addresses"), which still holds a guesser who rotates
// through the /64's addresses.
func TestIPv6LockoutHoldsTheHostNotItsLAN(t *testing.T) {
	e := newTestEnv(t)
	get := func(key, remote string) int {
		ctx := e.serve(testRequest{method: "GET", uri: "/v1/usage", remote: remote,
			header: [][2]string{{"Authorization", "Bearer " + key}}})
		return ctx.Response.StatusCode()
	}
	for i := 0; i < 20; i++ {
		if st := get("sk_live_bad", "[2001:db8:5:6::a]:1000"); st != 401 {
			t.Fatalf("failure %d: %d", i, st)
		}
	}
	if st := get(e.acct.LiveKey, "[2001:db8:5:6::a]:1000"); st != 429 {
		t.Fatalf("the failing address itself is not locked: %d", st)
	}
	if st := get(e.acct.LiveKey, "[2001:db8:5:6::b]:1000"); st != 200 {
		t.Fatalf("neighbour 2001:db8:5:6::b (never sent a bad key) got %d, want 200", st)
	}
	// A guesser rotating through the /64: 100 more bad keys from 5 more
	// addresses reach the /64's 120, and the /64 is locked.
	for h := 1; h <= 5; h++ {
		for i := 0; i < 20; i++ {
			get("sk_live_bad", "[2001:db8:5:6::"+string(rune('0'+h))+":1]:1000")
		}
	}
	if st := get(e.acct.LiveKey, "[2001:db8:5:6::c]:1000"); st != 429 {
		t.Fatalf("after 120 bad keys from the /64: a fresh address of it got %d, want 429", st)
	}
}
