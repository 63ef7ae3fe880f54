package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"

	"github.com/fraudd/fraudd/api"
)

// oaExchange is one request of the OpenAPI walk and the status it must get.
type oaExchange struct {
	name   string
	method string
	path   string
	header map[string]string
	bearer string
	body   any // []byte/string as is, else JSON
	status int
	// noAgent sends no User-Agent (the edge block).
	noAgent bool
	// loose: validate without strict mode, for bodies the document leaves
	// open on purpose (MCP messages, the document itself, the collector's
	// device report).
	loose bool
	// ctype, when set, is the media type the answer must have.
	ctype string
}

// TestOpenAPIAnswers sends real requests through the binary, covering every
// operation of api/openapi.yaml and most of their documented answers, and
// validates each answer against the document (served at /openapi.json) with
// libopenapi-validator in strict mode: a status, content type, field or type
// the document does not declare fails the test, so the document cannot drift
// from the server. Requests expected to succeed are validated too.
func TestOpenAPIAnswers(t *testing.T) {
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	defer hook.Close()
	s := StartServer(t, &Server{Bin: bin, Args: []string{"--allow-private-webhooks"}})

	served := s.Do(t, Req{Path: "/openapi.json"})
	if served.Status != 200 || !bytes.Equal(served.Body, api.OpenAPIJSON) {
		t.Fatalf("GET /openapi.json: %d, %d bytes; want the embedded document (%d bytes)", served.Status, len(served.Body), len(api.OpenAPIJSON))
	}
	doc, err := libopenapi.NewDocument(served.Body)
	if err != nil {
		t.Fatal(err)
	}
	// Transport headers (server name, CORS, encoding, nosniff) are not part
	// of the API; X-RateLimit-*, Retry-After and WWW-Authenticate are, and
	// must be declared where they are sent.
	v, errs := validator.NewValidator(doc, config.WithStrictMode(), config.WithFormatAssertions(),
		config.WithStrictIgnoredHeadersExtra("Server", "Content-Encoding", "Allow", "X-Content-Type-Options", "Access-Control-Allow-Origin",
			"Access-Control-Allow-Methods", "Access-Control-Allow-Headers", "Access-Control-Max-Age", "Access-Control-Expose-Headers"))
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	loose, errs := validator.NewValidator(doc, config.WithFormatAssertions())
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}

	// Accounts and state the walk needs.
	a := s.CreateAccount(t, map[string]any{"email": "oa@example.com", "plan": "starter"})
	capped := s.CreateAccount(t, map[string]any{"email": "oa-capped@example.com", "plan": "custom", "hourly_limit": 1, "monthly_limit": nil})
	walled := s.CreateAccount(t, map[string]any{"email": "oa-walled@example.com", "plan": "starter"})
	if r := s.Admin(t, "PATCH", "/admin/v1/accounts/"+walled.ID, map[string]any{"allowlist": []string{"203.0.113.0/24"}}); r.Status != 200 {
		t.Fatalf("allowlist: %d %s", r.Status, r.Body)
	}
	beta := s.CreateAccount(t, map[string]any{"email": "oa-beta@example.com", "plan": "growth"})
	if r := s.Admin(t, "PATCH", "/admin/v1/accounts/"+beta.ID, map[string]any{"device_evidence_beta": true, "origins": []string{"https://shop.example"}}); r.Status != 200 {
		t.Fatalf("beta: %d %s", r.Status, r.Body)
	}
	nt := collectToken(t, s, a.PublishableKey, "81.2.69.160", nil)
	ev := collectDevice(t, s, a.PublishableKey, "81.2.69.160", "chrome_desktop_windows")
	betaEv := collectDeviceFrom(t, s, beta.PublishableKey, "81.2.69.160", "https://shop.example", "chrome_desktop_windows")
	etag := s.Do(t, Req{Path: "/collector.js"}).Header.Get("ETag")
	acc := "/admin/v1/accounts/" + a.ID
	big := `{"token":"` + strings.Repeat("x", 65<<10) + `"}`
	mcpHdr := map[string]string{"Accept": "application/json, text/event-stream"}
	init := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "oa", "version": "1"}}}
	deviceBody := func(key string) map[string]any {
		return map[string]any{"key": key, "v": 1, "ua": "Mozilla/5.0", "hc": 8, "touch": 0, "plugins": 5}
	}
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}

	// The console's views: an account whose recent list holds a decision by
	// a rule on a degraded answer (ip "unknown", country null) and the
	// personal test key's (test: true); test tokens and the
	// bare degraded allow are never stored (SPEC 2.9, 2.8.6). The list is
	// written behind, so wait until both are there.
	rec := s.CreateAccount(t, map[string]any{"email": "oa-recent@example.com", "plan": "starter"})
	recent := "/admin/v1/accounts/" + rec.ID + "/evaluations"
	if r := s.Admin(t, "PUT", "/admin/v1/accounts/"+rec.ID+"/rules", []map[string]any{{"signal": "disposable_email", "action": "block"}}); r.Status != 200 {
		t.Fatalf("rules: %d %s", r.Status, r.Body)
	}
	for _, ev := range []struct {
		key  string
		body map[string]any
	}{{rec.LiveKey, map[string]any{"email": "x@mailinator.com"}}, {rec.TestKey, map[string]any{"tz": "Europe/Paris", "email": "y@mailinator.com", "accountId": "u1"}}} {
		if r := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: ev.key, Body: ev.body}); r.Status != 200 {
			t.Fatalf("evaluate %v: %d %s", ev.body, r.Status, r.Body)
		}
	}
	waitRecent(t, s, recent, 2)
	backupDir := filepath.Join(t.TempDir(), "backup")
	consoleTag := s.Do(t, Req{Path: "/console"}).Header.Get("ETag")

	walk := []oaExchange{
		{name: "evaluate sandbox", method: "POST", path: "/v1/evaluate", bearer: "sk_test_sandbox", body: map[string]any{"token": "test_vpn"}, status: 200},
		{name: "evaluate test token", method: "POST", path: "/v1/evaluate", bearer: a.LiveKey, body: map[string]any{"token": "test_tor"}, status: 200},
		{name: "evaluate degraded", method: "POST", path: "/v1/evaluate", bearer: a.LiveKey, body: map[string]any{"email": "x@mailinator.com", "tz": "Europe/Paris"}, status: 200},
		{name: "evaluate live", method: "POST", path: "/v1/evaluate", bearer: a.LiveKey,
			body: map[string]any{"token": nt, "fingerprintEventId": ev, "accountId": "user-1", "email": "a@example.com", "tz": "Europe/London"}, status: 200},
		{name: "evaluate form", method: "POST", path: "/v1/evaluate", bearer: a.TestKey, header: form, body: "token=test_clean&tz=Europe/Berlin", status: 200},
		{name: "evaluate text", method: "POST", path: "/v1/evaluate", bearer: a.LiveKey, header: map[string]string{"Content-Type": "text/plain"}, body: `{"token":"test_datacenter"}`, status: 200},
		{name: "evaluate bad token", method: "POST", path: "/v1/evaluate", bearer: a.LiveKey, body: map[string]any{"token": "nt1.garbage"}, status: 400},
		{name: "evaluate no key", method: "POST", path: "/v1/evaluate", body: map[string]any{"token": "test_vpn"}, status: 401},
		{name: "evaluate allowlist", method: "POST", path: "/v1/evaluate", bearer: walled.LiveKey, body: map[string]any{"token": "test_vpn"}, status: 403},
		{name: "evaluate edge block", method: "POST", path: "/v1/evaluate", bearer: a.LiveKey, body: map[string]any{"token": "test_vpn"}, noAgent: true, status: 403},
		{name: "evaluate too large", method: "POST", path: "/v1/evaluate", bearer: a.LiveKey, body: big, status: 413},
		{name: "evaluate capped 1", method: "POST", path: "/v1/evaluate", bearer: capped.LiveKey, body: map[string]any{"token": "test_clean"}, status: 200},
		{name: "evaluate capped 2", method: "POST", path: "/v1/evaluate", bearer: capped.LiveKey, body: map[string]any{"token": "test_clean"}, status: 429},
		{name: "sample", method: "GET", path: "/v1/evaluate/sample?scenario=bot", status: 200},
		{name: "sample unknown", method: "GET", path: "/v1/evaluate/sample?scenario=nope", status: 400},
		{name: "lookup tor", method: "GET", path: "/v1/lookup/185.220.101.42", bearer: a.LiveKey, status: 200},
		{name: "lookup cloud", method: "GET", path: "/v1/lookup/54.85.20.10", bearer: a.LiveKey, status: 200},
		{name: "lookup unknown", method: "GET", path: "/v1/lookup/81.2.69.160", bearer: a.TestKey, status: 200},
		{name: "lookup private", method: "GET", path: "/v1/lookup/10.0.0.1", bearer: a.LiveKey, status: 400},
		{name: "lookup no key", method: "GET", path: "/v1/lookup/185.220.101.42", status: 401},
		{name: "usage", method: "GET", path: "/v1/usage", bearer: a.LiveKey, status: 200},
		{name: "usage test key", method: "GET", path: "/v1/usage", bearer: a.TestKey, status: 200},
		{name: "usage bad key", method: "GET", path: "/v1/usage", bearer: "sk_live_nope", status: 401},
		{name: "challenge beta off", method: "POST", path: "/v1/device-evidence/challenge", bearer: a.LiveKey, body: map[string]any{"fingerprintEventId": ev}, status: 409},
		{name: "challenge", method: "POST", path: "/v1/device-evidence/challenge", bearer: beta.LiveKey, body: map[string]any{"fingerprintEventId": betaEv}, status: 200},
		{name: "challenge no id", method: "POST", path: "/v1/device-evidence/challenge", bearer: beta.LiveKey, body: map[string]any{}, status: 400},
		{name: "challenge test key", method: "POST", path: "/v1/device-evidence/challenge", bearer: beta.TestKey, body: map[string]any{"fingerprintEventId": betaEv}, status: 401},
		{name: "status", method: "GET", path: "/api/status", status: 200},
		{name: "threat feed", method: "GET", path: "/api/threat-feed", status: 200},
		{name: "free lookup", method: "POST", path: "/api/lookup", body: map[string]any{"ip": "185.220.101.42:443"}, status: 200},
		{name: "free lookup bad", method: "POST", path: "/api/lookup", body: map[string]any{"ip": "nope"}, status: 400},
		{name: "bulk", method: "POST", path: "/api/lookup-bulk", body: map[string]any{"ips": []string{"185.220.101.42", "54.85.20.10", "10.0.0.1"}}, status: 200},
		{name: "bulk empty", method: "POST", path: "/api/lookup-bulk", body: map[string]any{"ips": []string{"10.0.0.1"}}, status: 400},
		{name: "token", method: "POST", path: "/oauth/token", header: form, body: "grant_type=client_credentials&client_id=oa%40example.com&client_secret=" + a.LiveKey, status: 200},
		{name: "token grant", method: "POST", path: "/oauth/token", header: form, body: "grant_type=password", status: 400},
		{name: "token client", method: "POST", path: "/oauth/token", header: form, body: "grant_type=client_credentials&client_id=oa%40example.com&client_secret=sk_live_wrong", status: 401},
		{name: "as metadata", method: "GET", path: "/.well-known/oauth-authorization-server", status: 200},
		{name: "pr metadata", method: "GET", path: "/.well-known/oauth-protected-resource", status: 200},
		{name: "mcp initialize", loose: true, method: "POST", path: "/mcp", header: mcpHdr, body: init, status: 200},
		{name: "mcp preflight", method: "OPTIONS", path: "/mcp", header: map[string]string{"Origin": s.URL, "Access-Control-Request-Method": "POST"}, status: 204},
		{name: "mcp initialized", loose: true, method: "POST", path: "/mcp", header: mcpHdr, body: map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}, status: 202},
		{name: "mcp tools/list", loose: true, method: "POST", path: "/mcp", header: mcpHdr, bearer: a.LiveKey, body: map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, status: 200},
		{name: "mcp lookup_ip", loose: true, method: "POST", path: "/mcp", header: mcpHdr, bearer: a.LiveKey,
			body: map[string]any{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": map[string]any{"name": "lookup_ip", "arguments": map[string]any{"ip": "185.220.101.42"}}}, status: 200},
		{name: "mcp batch", loose: true, method: "POST", path: "/mcp", header: mcpHdr, body: []byte(`[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]`), status: 400},
		{name: "mcp bad bearer", loose: true, method: "POST", path: "/mcp", header: mcpHdr, bearer: "sk_live_nope", body: init, status: 401},
		{name: "collector.js", method: "GET", path: "/collector.js", status: 200},
		{name: "collector.js cached", method: "GET", path: "/collector.js", header: map[string]string{"If-None-Match": etag}, status: 304},
		{name: "collect network", method: "POST", path: "/v1/collect/network", body: map[string]any{"key": a.PublishableKey, "v": 1}, status: 200},
		{name: "collect network bad key", method: "POST", path: "/v1/collect/network", body: map[string]any{"key": "pk_live_nope"}, status: 401},
		{name: "collect network bad body", method: "POST", path: "/v1/collect/network", body: []byte("{nope"), status: 400},
		{name: "collect network preflight", method: "OPTIONS", path: "/v1/collect/network", header: map[string]string{"Origin": "https://shop.example", "Access-Control-Request-Method": "POST"}, status: 204},
		{name: "collect device", loose: true, method: "POST", path: "/v1/collect/device", body: deviceBody(a.PublishableKey), status: 200},
		{name: "collect device bad body", method: "POST", path: "/v1/collect/device", body: []byte("[]"), status: 400},
		{name: "collect device preflight", method: "OPTIONS", path: "/v1/collect/device", header: map[string]string{"Origin": "https://shop.example", "Access-Control-Request-Method": "POST"}, status: 204},
		{name: "healthz", method: "GET", path: "/healthz", status: 200},
		{name: "readyz", method: "GET", path: "/readyz", status: 200},
		{name: "openapi", loose: true, method: "GET", path: "/openapi.json", status: 200},
		{name: "metrics", method: "GET", path: "/metrics", bearer: AdminToken, status: 200},
		{name: "metrics no token", method: "GET", path: "/metrics", status: 401},

		{name: "admin create", method: "POST", path: "/admin/v1/accounts", bearer: AdminToken, body: map[string]any{"email": "oa-new@example.com", "plan": "custom", "hourly_limit": 10, "monthly_limit": nil}, status: 201},
		{name: "admin create bad", method: "POST", path: "/admin/v1/accounts", bearer: AdminToken, body: map[string]any{"email": "x@y.z", "plan": "gold"}, status: 400},
		{name: "admin create dup", method: "POST", path: "/admin/v1/accounts", bearer: AdminToken, body: map[string]any{"email": "oa@example.com"}, status: 409},
		{name: "admin no token", method: "POST", path: "/admin/v1/accounts", body: map[string]any{"email": "x@y.z"}, status: 401},
		{name: "admin get", method: "GET", path: acc, bearer: AdminToken, status: 200},
		{name: "admin get missing", method: "GET", path: "/admin/v1/accounts/acc_nope", bearer: AdminToken, status: 404},
		{name: "admin patch", method: "PATCH", path: acc, bearer: AdminToken, body: map[string]any{"origins": []string{"https://shop.example"}}, status: 200},
		{name: "admin patch limit", method: "PATCH", path: acc, bearer: AdminToken, body: map[string]any{"hourly_limit": 5}, status: 400},
		{name: "admin rotate live", method: "POST", path: acc + "/keys/live/rotate", bearer: AdminToken, status: 200},
		{name: "admin get after rotation", method: "GET", path: acc, bearer: AdminToken, status: 200},
		{name: "admin revoke previous", method: "POST", path: acc + "/keys/live/revoke-previous", bearer: AdminToken, status: 204},
		{name: "admin rotate test", method: "POST", path: acc + "/keys/test/rotate", bearer: AdminToken, status: 200},
		{name: "admin put rules", method: "PUT", path: acc + "/rules", bearer: AdminToken, body: []map[string]any{{"signal": "tor", "action": "review"}}, status: 200},
		{name: "admin put rules bad", method: "PUT", path: acc + "/rules", bearer: AdminToken, body: []map[string]any{{"signal": "moon", "action": "block"}}, status: 400},
		{name: "admin get rules", method: "GET", path: acc + "/rules", bearer: AdminToken, status: 200},
		{name: "admin put pins", method: "PUT", path: acc + "/exceptions", bearer: AdminToken,
			body: []map[string]any{{"ip": "203.0.113.0/24", "action": "allow", "label": "office"}, {"visitor_id": "vis_x", "action": "block"}}, status: 200},
		{name: "admin get pins", method: "GET", path: acc + "/exceptions", bearer: AdminToken, status: 200},
		{name: "admin webhook", method: "PUT", path: acc + "/webhook", bearer: AdminToken, body: map[string]any{"url": hook.URL + "/hook"}, status: 200},
		{name: "admin webhook bad", method: "PUT", path: acc + "/webhook", bearer: AdminToken, body: map[string]any{"url": "ftp://x"}, status: 400},
		{name: "admin webhook secret", method: "POST", path: acc + "/webhook/secret/rotate", bearer: AdminToken, status: 200},
		{name: "admin webhook test", method: "POST", path: acc + "/webhook/test", bearer: AdminToken, status: 202},
		{name: "admin deliveries", method: "GET", path: acc + "/webhook/deliveries", bearer: AdminToken, status: 200},
		{name: "admin devices", method: "GET", path: acc + "/devices", bearer: AdminToken, status: 200},
		{name: "admin mail", method: "GET", path: "/admin/v1/mail", bearer: AdminToken, status: 200},
		{name: "admin mail of an account", method: "GET", path: "/admin/v1/mail?limit=5&account=" + a.ID, bearer: AdminToken, status: 200},
		{name: "admin mail bad limit", method: "GET", path: "/admin/v1/mail?limit=0", bearer: AdminToken, status: 400},
		{name: "admin mail unknown account", method: "GET", path: "/admin/v1/mail?account=acc_nope", bearer: AdminToken, status: 404},
		{name: "admin clock", method: "POST", path: "/admin/v1/clock", bearer: AdminToken, body: map[string]any{"advance": "1h"}, status: 200},
		{name: "admin clock bad", method: "POST", path: "/admin/v1/clock", bearer: AdminToken, body: map[string]any{"advance": "soon"}, status: 400},
		{name: "admin list accounts", method: "GET", path: "/admin/v1/accounts", bearer: AdminToken, status: 200},
		{name: "admin search accounts", method: "GET", path: "/admin/v1/accounts?q=OA-&limit=2", bearer: AdminToken, status: 200},
		{name: "admin list accounts bad limit", method: "GET", path: "/admin/v1/accounts?limit=0", bearer: AdminToken, status: 400},
		{name: "admin list accounts no token", method: "GET", path: "/admin/v1/accounts", status: 401},
		{name: "admin usage", method: "GET", path: acc + "/usage", bearer: AdminToken, status: 200},
		{name: "admin usage missing", method: "GET", path: "/admin/v1/accounts/acc_nope/usage", bearer: AdminToken, status: 404},
		{name: "admin evaluations", method: "GET", path: recent, bearer: AdminToken, status: 200},
		{name: "admin evaluations limit", method: "GET", path: recent + "?limit=1", bearer: AdminToken, status: 200},
		{name: "admin evaluations bad limit", method: "GET", path: recent + "?limit=201", bearer: AdminToken, status: 400},
		{name: "admin evaluations missing", method: "GET", path: "/admin/v1/accounts/acc_nope/evaluations", bearer: AdminToken, status: 404},
		{name: "admin feeds", method: "GET", path: "/admin/v1/feeds", bearer: AdminToken, status: 200},
		{name: "admin backup", method: "POST", path: "/admin/v1/backup", bearer: AdminToken, body: map[string]any{"dir": backupDir}, status: 200},
		{name: "admin backup again", method: "POST", path: "/admin/v1/backup", bearer: AdminToken, body: map[string]any{"dir": backupDir}, status: 409},
		{name: "admin backup relative", method: "POST", path: "/admin/v1/backup", bearer: AdminToken, body: map[string]any{"dir": "backup"}, status: 400},
		{name: "admin backup no dir", method: "POST", path: "/admin/v1/backup", bearer: AdminToken, body: map[string]any{}, status: 400},
		{name: "console", method: "GET", path: "/console", status: 200, ctype: "text/html"},
		{name: "console cached", method: "GET", path: "/console", header: map[string]string{"If-None-Match": consoleTag}, status: 304},
		{name: "console script", method: "GET", path: "/console/console.js", status: 200, ctype: "application/javascript"},
		{name: "console stylesheet", method: "GET", path: "/console/console.css", status: 200, ctype: "text/css"},
		{name: "console unknown file", method: "GET", path: "/console/nope.js", status: 404},
		{name: "console edge block", method: "GET", path: "/console", noAgent: true, status: 403},
	}

	covered := map[string]bool{}
	for _, x := range walk {
		req, resp, body := oaDo(t, s, x)
		if resp.StatusCode != x.status {
			t.Errorf("%s: %s %s: %d, want %d: %s", x.name, x.method, x.path, resp.StatusCode, x.status, snippet(body))
			continue
		}
		covered[oaOperation(doc, x.method, x.path)] = true
		if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); x.ctype != "" && ct != x.ctype {
			t.Errorf("%s: %s %s: Content-Type %q, want %s", x.name, x.method, x.path, resp.Header.Get("Content-Type"), x.ctype)
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		v := v
		if x.loose {
			v = loose
		}
		if ok, verrs := v.ValidateHttpResponse(req, resp); !ok {
			t.Errorf("%s: %s %s %d: the answer does not match the document:\n%s\n%s", x.name, x.method, x.path, resp.StatusCode, oaErrors(verrs), snippet(body))
		}
		if x.status < 300 && x.body != nil && !x.noAgent {
			req2, _ := oaRequest(s, x)
			if ok, verrs := v.ValidateHttpRequest(req2); !ok {
				t.Errorf("%s: %s %s: the request does not match the document:\n%s", x.name, x.method, x.path, oaErrors(verrs))
			}
		}
	}
	// Every operation of the document was exercised.
	model, _ := doc.BuildV3Model()
	var missing []string
	for p, item := range model.Model.Paths.PathItems.FromOldest() {
		for m := range item.GetOperations().KeysFromOldest() {
			if op := strings.ToUpper(m) + " " + p; !covered[op] {
				missing = append(missing, op)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("operations of the document no request exercised: %v", missing)
	}
}

// waitRecent waits until the recent evaluations at path list n entries:
// they are written behind the answers.
func waitRecent(t *testing.T, s *Server, path string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := s.Admin(t, "GET", path, nil)
		var list []json.RawMessage
		if r.Status != 200 || json.Unmarshal(r.Body, &list) != nil {
			t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
		}
		if len(list) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d evaluations after 30 s, want %d", path, len(list), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func oaRequest(s *Server, x oaExchange) (*http.Request, []byte) {
	var body []byte
	ctype := ""
	switch b := x.body.(type) {
	case nil:
	case []byte:
		body = b
	case string:
		body = []byte(b)
	default:
		body, _ = json.Marshal(b)
		ctype = "application/json"
	}
	req, _ := http.NewRequest(x.method, s.URL+x.path, bytes.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	} else if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if x.noAgent {
		req.Header.Set("User-Agent", "")
	} else {
		req.Header.Set("User-Agent", UserAgent)
	}
	if x.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+x.bearer)
	}
	for k, v := range x.header {
		req.Header.Set(k, v)
	}
	return req, body
}

func oaDo(t *testing.T, s *Server, x oaExchange) (*http.Request, *http.Response, []byte) {
	t.Helper()
	req, body := oaRequest(s, x)
	resp, err := http.DefaultTransport.RoundTrip(req)
	// The server answers 413 from the headers and closes, so the client may
	// still be writing the body: a broken pipe there is the refusal arriving
	// early, not a failure; try again until the answer is read.
	for i := 0; err != nil && x.status == 413 && i < 10; i++ {
		req, body = oaRequest(s, x)
		resp, err = http.DefaultTransport.RoundTrip(req)
	}
	if err != nil {
		t.Fatalf("%s: %v", x.name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	return req, resp, b
}

// oaOperation names the document's operation a request hits ("POST /v1/evaluate").
func oaOperation(doc libopenapi.Document, method, path string) string {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	model, _ := doc.BuildV3Model()
	for p := range model.Model.Paths.PathItems.KeysFromOldest() {
		if oaPathMatch(p, path) {
			return method + " " + p
		}
	}
	return method + " " + path
}

func oaPathMatch(pattern, path string) bool {
	ps, xs := strings.Split(pattern, "/"), strings.Split(path, "/")
	if len(ps) != len(xs) {
		return false
	}
	for i := range ps {
		if strings.HasPrefix(ps[i], "{") || ps[i] == xs[i] {
			continue
		}
		return false
	}
	return true
}

func oaErrors(errs any) string {
	b, _ := json.MarshalIndent(errs, "", "  ")
	return string(b)
}

func snippet(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "…"
	}
	return fmt.Sprintf("%s", b)
}
