package e2e

import (
	"strings"
	"testing"
	"time"
)

func TestLookupEndpoint(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "lk@example.com", "plan": "starter"})
	get := func(ip, key string) *Response { return s.Do(t, Req{Path: "/v1/lookup/" + ip, Bearer: key}) }

	r := get("8.8.8.8", a.LiveKey)
	m := r.JSON(t)
	if r.Status != 200 || m["known"] != false || m["signals"] != nil || m["verdict"] != "allow" || num(t, m, "risk_score") != 0 {
		t.Fatalf("8.8.8.8: %s", r.Body)
	}
	n := m["network"].(map[string]any)
	if num(t, n, "asn") != 15169 || n["country"] != nil || n["city"] != nil || n["source"] != "asn_table" || n["registration_country"] != "US" {
		t.Fatalf("8.8.8.8 network: %v", n)
	}
	if _, ok := m["test"]; ok || r.Header.Get("X-RateLimit-Limit") != "5000" {
		t.Fatalf("live key lookup: test=%v headers=%v", m["test"], r.Header)
	}
	// A published cloud range → review 40 with the provider id.
	m = get("52.95.110.1", a.LiveKey).JSON(t)
	if m["known"] != true || m["verdict"] != "review" || num(t, m, "risk_score") != 40 || m["network"].(map[string]any)["cloud"] != "aws" {
		t.Fatalf("aws address: %v", m)
	}
	sig := m["signals"].(map[string]any)
	if sig["dch"] != true || sig["vpn"] != false || sig["proxied"] != false || sig["tor"] != false {
		t.Fatalf("aws signals: %v", sig)
	}
	// IPv6 works too; the test key marks the answer.
	m = get("2606:4700::1111", a.TestKey).JSON(t)
	if m["test"] != true || m["network"].(map[string]any)["cloud"] != "cloudflare" {
		t.Fatalf("cloudflare v6 with test key: %v", m)
	}
	for _, c := range []struct{ ip, msg string }{
		{"not-an-ip", "Invalid IP format."},
		{"1.2.3.4:80", "Invalid IP format."},
		{"fe80::1%25eth0", "Invalid IP format."},
		{"10.0.0.1", "Private or reserved IP — nothing to look up."},
		{"100.64.1.1", "Private or reserved IP — nothing to look up."},
		{"192.0.2.1", "Private or reserved IP — nothing to look up."},
		{"2001:db8::1", "Private or reserved IP — nothing to look up."},
		{"::ffff:8.8.8.8", "Private or reserved IP — nothing to look up."},
		{"64:ff9b::808:808", "Private or reserved IP — nothing to look up."},
	} {
		r := get(c.ip, a.LiveKey)
		if r.Status != 400 || r.JSON(t)["error"] != c.msg {
			t.Errorf("%s: %d %s", c.ip, r.Status, r.Body)
		}
	}
	// Exception pins author the verdict; the engine's stays visible.
	s.Admin(t, "PUT", "/admin/v1/accounts/"+a.ID+"/exceptions", []map[string]any{{"ip": "52.95.110.0/24", "action": "block", "label": "bad range"}})
	m = get("52.95.110.1", a.LiveKey).JSON(t)
	if m["verdict"] != "block" || m["engine_verdict"] != "review" || m["verdict_source"] != "exception" || toStrings(m["exception_matched"])[0] != "bad range" || num(t, m, "risk_score") != 40 {
		t.Fatalf("pinned lookup: %v", m)
	}
	// A pin that leaves the verdict as it was is still reported.
	s.Admin(t, "PUT", "/admin/v1/accounts/"+a.ID+"/exceptions", []map[string]any{{"ip": "8.8.8.8", "action": "allow"}})
	if m := get("8.8.8.8", a.LiveKey).JSON(t); m["engine_verdict"] != "allow" || m["verdict_source"] != "exception" {
		t.Fatalf("unchanged pinned verdict: %v", m)
	}
}

func TestTorExitLookup(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "tor@example.com"})
	// 185.220.101.1 has been a Tor exit for years; it is in the embedded list.
	m := s.Do(t, Req{Path: "/v1/lookup/185.220.101.1", Bearer: a.LiveKey}).JSON(t)
	if m["known"] != true || m["verdict"] != "block" || num(t, m, "risk_score") != 90 || m["signals"].(map[string]any)["tor"] != true || m["signals"].(map[string]any)["anon"] != true {
		t.Fatalf("tor exit: %v", m)
	}
}

func TestFreeLookupForms(t *testing.T) {
	s := Start(t, bin)
	for i, c := range []struct{ in, want string }{
		{"1.1.1.1", "1.1.1.1"},
		{" 1.1.1.1:80 ", "1.1.1.1"},
		{"[2606:4700:0:0::1111]:443", "2606:4700::1111"},
		{"https://1.1.1.1:8080/path?q=1", "1.1.1.1"},
		{"http://[2606:4700::1111]/", "2606:4700::1111"},
		{"１．１．１．１", "1.1.1.1"},
		{"::ffff:1.1.1.1", "1.1.1.1"},
	} {
		// Each form from its own address: the free tool allows 12 a minute.
		r := s.Do(t, Req{Method: "POST", Path: "/api/lookup", Body: map[string]any{"ip": c.in},
			Header: map[string]string{"X-Forwarded-For": "198.51.100." + itoa(10+i)}})
		if r.Status != 200 || r.JSON(t)["ip"] != c.want {
			t.Errorf("%q: %d %s", c.in, r.Status, r.Body)
		}
	}
	for _, c := range []struct {
		body any
		msg  string
	}{
		{map[string]any{}, "Missing"},
		{map[string]any{"ip": 5}, "Invalid"},
		{map[string]any{"ip": "999.1.1.1"}, "Invalid"},
		{map[string]any{"ip": "192.168.1.1"}, "Private or reserved"},
		{"not json", "Missing"},
	} {
		r := s.Do(t, Req{Method: "POST", Path: "/api/lookup", Body: c.body})
		if r.Status != 400 || !strings.Contains(r.JSON(t)["error"].(string), c.msg) {
			t.Errorf("%v: %d %s", c.body, r.Status, r.Body)
		}
	}
}

func TestBulkLookup(t *testing.T) {
	s := Start(t, bin)
	ips := []any{"1.1.1.1", "1.1.1.1:53", "not-an-ip", "10.0.0.1", 7, "2606:4700::1111", "[2606:4700:0::1111]:443"}
	for i := 0; i < 25; i++ {
		ips = append(ips, "8.8.4."+itoa(i+1))
	}
	r := s.Do(t, Req{Method: "POST", Path: "/api/lookup-bulk", Body: map[string]any{"ips": ips, "email": "ignored@example.com"}})
	if r.Status != 200 {
		t.Fatalf("bulk: %d %s", r.Status, r.Body)
	}
	m := r.JSON(t)
	// 1.1.1.1 and 2606:4700::1111 once each, then 18 of the 25 others; 7 not checked;
	// invalid: not-an-ip, 10.0.0.1 and the number.
	if num(t, m, "total") != 20 || num(t, m, "invalid") != 3 || num(t, m, "not_checked") != 7 || num(t, m, "skipped") != 10 || len(m["results"].([]any)) != 20 {
		t.Fatalf("bulk counts: total=%v invalid=%v not_checked=%v skipped=%v results=%d", m["total"], m["invalid"], m["not_checked"], m["skipped"], len(m["results"].([]any)))
	}
	if first := m["results"].([]any)[0].(map[string]any); first["ip"] != "1.1.1.1" || first["network"].(map[string]any)["asn"] != float64(13335) {
		t.Fatalf("first result: %v", first)
	}
	for _, body := range []any{map[string]any{}, map[string]any{"ips": []string{"10.1.1.1", "bad"}}, map[string]any{"ips": "1.1.1.1"}} {
		if r := s.Do(t, Req{Method: "POST", Path: "/api/lookup-bulk", Body: body}); r.Status != 400 {
			t.Errorf("%v: %d %s", body, r.Status, r.Body)
		}
	}
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

func TestThreatFeed(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "tf@example.com", "plan": "public_interest"})
	r := s.Do(t, Req{Path: "/api/threat-feed"})
	m := r.JSON(t)
	cov := m["coverage"].(map[string]any)
	if r.Status != 200 || num(t, cov, "tor_exits") < 1000 || num(t, cov, "dch_ranges") < 1000 || num(t, cov, "cloud_providers") < 5 || num(t, cov, "disposable_domains") < 10000 {
		t.Fatalf("threat feed: %d %s", r.Status, r.Body)
	}
	if num(t, m["today"].(map[string]any), "total") != 0 || num(t, m, "week_total") != 0 {
		t.Fatalf("fresh server counts traffic: %s", r.Body)
	}
	s.Do(t, Req{Path: "/v1/lookup/185.220.101.1", Bearer: a.LiveKey})                                                // Tor: a threat
	s.Do(t, Req{Path: "/v1/lookup/52.95.110.1", Bearer: a.LiveKey})                                                  // cloud: a threat (review), dch
	s.Do(t, Req{Path: "/v1/lookup/8.8.8.8", Bearer: a.TestKey})                                                      // test key: not counted
	s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: a.LiveKey, Body: map[string]any{"token": "test_tor"}}) // test token: not counted
	s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: a.LiveKey, Body: map[string]any{}})                    // degraded live: counted
	var today map[string]any
	for i := 0; i < 50; i++ {
		m = s.Do(t, Req{Path: "/api/threat-feed"}).JSON(t)
		today = m["today"].(map[string]any)
		if num(t, today, "total") == 3 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if num(t, today, "total") != 3 || num(t, today, "threats") != 2 || num(t, today, "dch") != 1 || num(t, m, "week_total") != 3 ||
		num(t, m["week"].(map[string]any), "total") != 3 {
		t.Fatalf("threat feed after traffic: %v", m)
	}
	s.Restart()
	if m := s.Do(t, Req{Path: "/api/threat-feed"}).JSON(t); num(t, m, "week_total") != 3 {
		t.Fatalf("week_total after restart: %v", m)
	}
	s.Advance(t, "25h")
	if m := s.Do(t, Req{Path: "/api/threat-feed"}).JSON(t); num(t, m["today"].(map[string]any), "total") != 0 || num(t, m, "week_total") != 3 {
		t.Fatalf("a day later: %v", m)
	}
}
