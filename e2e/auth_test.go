package e2e

import (
	"encoding/base64"
	"strings"
	"testing"
)

// authProbe is an authenticated endpoint that enforces the live-key allowlist.
const authProbe = "/v1/lookup/8.8.8.8"

func TestAuthentication(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "auth@example.com", "plan": "starter"})

	for _, c := range []struct {
		name, header string
		status       int
		msg, hint    string
	}{
		{"no header", "", 401, "Missing Key.", "Bearer"},
		{"empty bearer", "Bearer", 401, "Missing Key.", "nothing after it"},
		{"bearer and spaces", "Bearer    ", 401, "Missing Key.", "nothing after it"},
		{"undefined", "Bearer undefined", 401, "Invalid API Key.", "undefined"},
		{"publishable key", "Bearer " + a.PublishableKey, 401, "Invalid API Key.", "publishable"},
		{"wrong prefix", "Bearer key_123", 401, "Invalid API Key.", "sk_live_"},
		{"unknown live key", "Bearer sk_live_" + strings.Repeat("x", 43), 401, "Invalid API Key.", "not recognised"},
		{"whitespace inside", "Bearer sk_live_abc def", 401, "Invalid API Key.", "whitespace"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := map[string]string{}
			if c.header != "" {
				h["Authorization"] = c.header
			}
			r := s.Do(t, Req{Path: authProbe, Header: h})
			m := r.JSON(t)
			if r.Status != c.status || m["error"] != c.msg || !strings.Contains(m["hint"].(string), c.hint) {
				t.Fatalf("got %d %s", r.Status, r.Body)
			}
		})
	}
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		r := s.Do(t, Req{Path: "/v1/usage", Header: map[string]string{"Authorization": scheme + " " + a.LiveKey}})
		if r.Status != 200 || r.JSON(t)["key_type"] != "live" {
			t.Fatalf("scheme %q: %d %s", scheme, r.Status, r.Body)
		}
	}
	if r := s.Do(t, Req{Path: "/v1/usage", Bearer: a.TestKey}); r.Status != 200 || r.JSON(t)["key_type"] != "test" {
		t.Fatalf("test key: %d %s", r.Status, r.Body)
	}
	r := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: "sk_test_sandbox", Body: map[string]any{"token": "test_clean"}})
	if r.Status != 200 || r.JSON(t)["sandbox"] != true {
		t.Fatalf("sandbox key: %d %s", r.Status, r.Body)
	}
	if strings.Contains(s.Logs(), a.LiveKey) || strings.Contains(s.Logs(), a.TestKey) {
		t.Fatal("a key appears in the server log")
	}
}

func TestSuspensionAndAllowlist(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "allow@example.com"})
	base := "/admin/v1/accounts/" + a.ID
	s.Admin(t, "PATCH", base, map[string]any{"allowlist": []string{"198.51.100.0/24"}})

	from := func(ip string) map[string]string { return map[string]string{"X-Forwarded-For": ip} }
	if r := s.Do(t, Req{Path: authProbe, Bearer: a.LiveKey, Header: from("198.51.100.9")}); r.Status != 200 {
		t.Fatalf("allowlisted caller: %d %s", r.Status, r.Body)
	}
	r := s.Do(t, Req{Path: authProbe, Bearer: a.LiveKey, Header: from("192.0.2.1")})
	if r.Status != 403 || !strings.Contains(r.JSON(t)["hint"].(string), "192.0.2.1") {
		t.Fatalf("caller off the allowlist: %d %s", r.Status, r.Body)
	}
	// The right-most untrusted hop is the caller; a spoofed left-most one is ignored.
	r = s.Do(t, Req{Path: authProbe, Bearer: a.LiveKey, Header: from("198.51.100.9, 192.0.2.1, 127.0.0.5")})
	if r.Status != 403 || !strings.Contains(r.JSON(t)["hint"].(string), "192.0.2.1") {
		t.Fatalf("X-Forwarded-For walk: %d %s", r.Status, r.Body)
	}
	if r := s.Do(t, Req{Path: authProbe, Bearer: a.TestKey, Header: from("192.0.2.1")}); r.Status != 200 {
		t.Fatalf("test key must be exempt from the allowlist: %d %s", r.Status, r.Body)
	}

	s.Admin(t, "PATCH", base, map[string]any{"suspended": true})
	for _, k := range []string{a.LiveKey, a.TestKey} {
		r := s.Do(t, Req{Path: authProbe, Bearer: k, Header: from("198.51.100.9")})
		if r.Status != 403 || r.JSON(t)["error"] != "Account suspended." {
			t.Fatalf("suspended: %d %s", r.Status, r.Body)
		}
	}
	s.Admin(t, "PATCH", base, map[string]any{"suspended": false, "allowlist": []string{}})
	if r := s.Do(t, Req{Path: authProbe, Bearer: a.LiveKey, Header: from("192.0.2.1")}); r.Status != 200 {
		t.Fatalf("after lifting suspension and allowlist: %d %s", r.Status, r.Body)
	}
}

func TestKeyRotation(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "rot@example.com"})
	base := "/admin/v1/accounts/" + a.ID
	ok := func(key string) bool { return s.Do(t, Req{Path: authProbe, Bearer: key}).Status == 200 }

	r := s.Admin(t, "POST", base+"/keys/live/rotate", nil)
	if r.Status != 200 {
		t.Fatalf("rotate: %d %s", r.Status, r.Body)
	}
	live2 := r.JSON(t)["live_key"].(string)
	if r.JSON(t)["previous_valid_until"] == "" || live2 == a.LiveKey {
		t.Fatalf("rotate body: %s", r.Body)
	}
	if !ok(live2) || !ok(a.LiveKey) {
		t.Fatal("after rotation both the new key and the old one (in grace) must work")
	}
	if g := s.Admin(t, "GET", base, nil).JSON(t); g["previous_live_key"] == nil {
		t.Fatal("GET account does not show the previous key in grace")
	}
	s.Advance(t, "23h59m")
	if !ok(a.LiveKey) {
		t.Fatal("old key stopped before 24 hours")
	}
	s.Advance(t, "2m")
	if ok(a.LiveKey) || !ok(live2) {
		t.Fatal("old key still works after 24 hours, or the new one stopped")
	}

	// A second rotation ends the earlier grace at once.
	live3 := s.Admin(t, "POST", base+"/keys/live/rotate", nil).JSON(t)["live_key"].(string)
	if !ok(live2) {
		t.Fatal("live2 should be in grace after the first rotation of it")
	}
	live4 := s.Admin(t, "POST", base+"/keys/live/rotate", nil).JSON(t)["live_key"].(string)
	if ok(live2) || !ok(live3) || !ok(live4) {
		t.Fatal("second rotation: live2 must stop, live3 in grace, live4 current")
	}
	if r := s.Admin(t, "POST", base+"/keys/live/revoke-previous", nil); r.Status != 204 {
		t.Fatalf("revoke-previous: %d", r.Status)
	}
	if ok(live3) || !ok(live4) {
		t.Fatal("revoke-previous must end live3 at once and keep live4")
	}

	test2 := s.Admin(t, "POST", base+"/keys/test/rotate", nil).JSON(t)["test_key"].(string)
	if ok(a.TestKey) || !ok(test2) {
		t.Fatal("test rotation must stop the old test key at once")
	}
	// Keys survive a restart; the grace state does too.
	live5 := s.Admin(t, "POST", base+"/keys/live/rotate", nil).JSON(t)["live_key"].(string)
	s.Restart()
	if !ok(live5) || !ok(live4) || !ok(test2) || ok(live3) {
		t.Fatal("keys after restart")
	}
}

func TestInvalidKeyLockout(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "lock@example.com"})
	from := map[string]string{"X-Forwarded-For": "198.51.100.77"}
	for i := 0; i < 20; i++ {
		r := s.Do(t, Req{Path: authProbe, Bearer: "sk_live_wrong", Header: from})
		if r.Status != 401 {
			t.Fatalf("bad key %d: %d %s", i, r.Status, r.Body)
		}
	}
	// Locked out now, even with a good key, on evaluate/lookup and /v1/usage alike.
	for _, p := range []string{authProbe, "/v1/usage"} {
		r := s.Do(t, Req{Path: p, Bearer: a.LiveKey, Header: from})
		if r.Status != 429 || r.Header.Get("Retry-After") != "900" || r.JSON(t)["error"] == "" {
			t.Fatalf("%s while locked out: %d Retry-After=%q %s", p, r.Status, r.Header.Get("Retry-After"), r.Body)
		}
	}
	// Another address is not affected.
	if r := s.Do(t, Req{Path: authProbe, Bearer: a.LiveKey, Header: map[string]string{"X-Forwarded-For": "198.51.100.78"}}); r.Status != 200 {
		t.Fatalf("other address: %d %s", r.Status, r.Body)
	}
	s.Advance(t, "15m1s")
	if r := s.Do(t, Req{Path: authProbe, Bearer: a.LiveKey, Header: from}); r.Status != 200 {
		t.Fatalf("after 15 minutes: %d %s", r.Status, r.Body)
	}
}

// TestTwoAuthorizationHeadersRefused: a request with two Authorization
// headers (a proxy that adds its own beside the client's) is ambiguous and
// refused, whichever comes first, as an unreadable header is: 401 Missing
// Key. with a hint on the API and on /mcp, 401 on the operator API, 400
// invalid_request at the token endpoint. It used to be served as the first.
func TestTwoAuthorizationHeadersRefused(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "twice@example.com", "plan": "starter"})
	live, other := "Bearer "+a.LiveKey, "Bearer sk_live_"+strings.Repeat("y", 43)
	for _, pair := range [][2]string{{live, other}, {other, live}, {live, live}} {
		two := [][2]string{{"Authorization", pair[0]}, {"Authorization", pair[1]}}
		for _, r := range []Req{
			{Path: "/v1/usage", Add: two},
			{Path: authProbe, Add: two},
			{Method: "POST", Path: "/v1/evaluate", Add: two, Body: map[string]any{"token": "test_vpn"}},
		} {
			got := s.Do(t, r)
			m := got.JSON(t)
			if got.Status != 401 || m["error"] != "Missing Key." || !strings.Contains(m["hint"].(string), "one Authorization header") {
				t.Fatalf("%s %s with %q: %d %s", r.Method, r.Path, pair, got.Status, got.Body)
			}
		}
		r := s.Do(t, Req{Method: "POST", Path: "/mcp", Add: two,
			Header: map[string]string{"Accept": "application/json, text/event-stream", "Content-Type": "application/json"},
			Body:   `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`})
		if r.Status != 401 || !strings.Contains(string(r.Body), "one Authorization header") {
			t.Fatalf("/mcp with %q: %d %s", pair, r.Status, r.Body)
		}
	}
	adm := "Bearer " + AdminToken
	for _, pair := range [][2]string{{adm, "Bearer wrong"}, {"Bearer wrong", adm}, {adm, adm}} {
		r := s.Do(t, Req{Path: "/admin/v1/accounts/" + a.ID, Base: s.AdminURL, Add: [][2]string{{"Authorization", pair[0]}, {"Authorization", pair[1]}}})
		if r.Status != 401 || r.JSON(t)["error"] != "Invalid admin token." {
			t.Fatalf("admin with %q: %d %s", pair, r.Status, r.Body)
		}
	}
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("twice@example.com:"+a.LiveKey))
	r := s.Do(t, Req{Method: "POST", Path: "/oauth/token", Body: "grant_type=client_credentials",
		Header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
		Add:    [][2]string{{"Authorization", basic}, {"Authorization", basic}}})
	if r.Status != 400 || r.JSON(t)["error"] != "invalid_request" {
		t.Fatalf("token endpoint with two Basic headers: %d %s", r.Status, r.Body)
	}
	// One header each still works.
	if r := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}); r.Status != 200 {
		t.Fatalf("one header: %d %s", r.Status, r.Body)
	}
	if r := s.Admin(t, "GET", "/admin/v1/accounts/"+a.ID, nil); r.Status != 200 {
		t.Fatalf("one operator header: %d %s", r.Status, r.Body)
	}
	r = s.Do(t, Req{Method: "POST", Path: "/oauth/token", Body: "grant_type=client_credentials",
		Header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Authorization": basic}})
	if r.Status != 200 {
		t.Fatalf("token endpoint with one Basic header: %d %s", r.Status, r.Body)
	}
}
