package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// Env is what a scenario's set-up uses: the fraudd under test and its admin
// API. Set-up creates the scenario's own accounts, mints what it needs, and
// probes each request kind once (to check the endpoint is there and to learn
// the answer's size for the floor).
type Env struct {
	Target *Target
	Admin  *Admin
	// Plan is the plan of the accounts scenarios create: "custom" (null
	// hourly and monthly limits) or "public_interest". Default "custom".
	Plan string
	Rand *rand.Rand
	// Log receives progress lines (accounts created, tokens minted).
	Log io.Writer
	// LiveTokens is how many network tokens evaluate-live mints. Default 1000.
	LiveTokens int
}

func (e *Env) plan() string {
	if e.Plan == "" {
		return "custom"
	}
	return e.Plan
}

func (e *Env) logf(format string, args ...any) {
	if e.Log != nil {
		fmt.Fprintf(e.Log, format+"\n", args...)
	}
}

// Unavailable is the error of a scenario whose endpoint the server does not
// have (yet): the scenario is skipped, not failed.
type Unavailable struct{ Reason string }

func (u *Unavailable) Error() string { return u.Reason }

// IsUnavailable reports whether err says a scenario cannot run on this server.
func IsUnavailable(err error) bool {
	var u *Unavailable
	return errors.As(err, &u)
}

// Scenario is one named load: its set-up builds the workload.
type Scenario struct {
	Name    string
	Summary string
	Setup   func(env *Env) (*Workload, error)
}

// Scenarios lists every scenario, in the order `all` runs them.
var Scenarios = []*Scenario{
	{Name: "status", Summary: "GET /api/status, no auth: the cheapest real route", Setup: setupStatus},
	{Name: "evaluate-test", Summary: "POST /v1/evaluate with a live key and the five test tokens (clean 40%, vpn 20%, datacenter 20%, proxy 10%, tor 10%)", Setup: setupEvaluateTest},
	{Name: "evaluate-live", Summary: "POST /v1/evaluate with real network tokens minted beforehand by POST /v1/collect/network for a visitor mix (residential 62%, mobile 10%, cloud 8%, VPN 8%, hosting 4%, privacy relay 3%, open proxy 3%, Tor 2%), with emails (some disposable), time zones (some mismatched) and account ids", Setup: setupEvaluateLive},
	{Name: "lookup", Summary: "GET /v1/lookup/{ip} with a live key over the same address mix", Setup: setupLookup},
	{Name: "free-lookup", Summary: "POST /api/lookup, no auth, from many caller addresses (X-Forwarded-For) so the per-address limits never refuse", Setup: setupFreeLookup},
	{Name: "usage", Summary: "GET /v1/usage with live (80%) and test (20%) keys from many caller addresses", Setup: setupUsage},
	{Name: "oauth", Summary: "POST /oauth/token client_credentials exchanges (form body) from many caller addresses", Setup: setupOAuth},
	{Name: "mcp", Summary: "POST /mcp tools/call lookup_ip with a live key (stateless streamable HTTP)", Setup: setupMCP},
	{Name: "mixed", Summary: "weighted like real traffic: evaluate-live 60, lookup 15, evaluate-test 8, usage 5, free-lookup 5, status 3, oauth 2, mcp 2 (parts whose endpoint is missing are dropped)", Setup: setupMixed},
}

// mixedWeights is the mixed scenario's share per scenario.
var mixedWeights = []struct {
	name   string
	weight float64
	setup  func(*Env) (*Workload, error)
}{
	{"evaluate-live", 60, setupEvaluateLive}, {"lookup", 15, setupLookup}, {"evaluate-test", 8, setupEvaluateTest},
	{"usage", 5, setupUsage}, {"free-lookup", 5, setupFreeLookup}, {"status", 3, setupStatus},
	{"oauth", 2, setupOAuth}, {"mcp", 2, setupMCP},
}

// ScenarioByName finds a scenario.
func ScenarioByName(name string) (*Scenario, bool) {
	for _, s := range Scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return nil, false
}

// ScenarioNames lists the scenario names.
func ScenarioNames() []string {
	out := make([]string, len(Scenarios))
	for i, s := range Scenarios {
		out[i] = s.Name
	}
	return out
}

var (
	hdrAuth        = []byte("Authorization")
	hdrContentType = []byte("Content-Type")
	ctJSON         = []byte("application/json")
	ctForm         = []byte("application/x-www-form-urlencoded")
)

func bearer(key string) []byte { return []byte("Bearer " + key) }

// pickBody is a uniform pick from a pool of request bodies (weights are
// expressed by repetition).
func pickBody(f *Filler, pool [][]byte) []byte { return pool[f.Rand.IntN(len(pool))] }

// probe sends a few requests of part p to the server under test: a 404 or
// 405 makes the scenario unavailable; any other failure is an error. It sets
// p.RespSize to the mean answer size.
func probe(env *Env, p *Part, n int, check func(body []byte) error) error {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	f := &Filler{Rand: rand.New(rand.NewPCG(env.Rand.Uint64(), 7))}
	total := 0
	for i := 0; i < n; i++ {
		req.Reset()
		p.Fill(req, f)
		method, uri := string(req.Header.Method()), string(req.RequestURI())
		if err := env.Target.Do(req, resp, 10*time.Second); err != nil {
			return fmt.Errorf("%s: probe %s %s: %w", p.Name, method, uri, err)
		}
		code := resp.StatusCode()
		if code == 404 || code == 405 {
			return &Unavailable{Reason: fmt.Sprintf("endpoint not available (%d): %s %s", code, method, pathOnly(uri))}
		}
		if code == 429 {
			ref := &Refusal{Body: resp.Body(), RateLimited: len(resp.Header.Peek("X-RateLimit-Limit")) > 0}
			return fmt.Errorf("%s: probe %s %s: HTTP 429: %s: %s", p.Name, method, pathOnly(uri), snippet(resp.Body()), cause429(ref, true))
		}
		if code != 200 {
			return fmt.Errorf("%s: probe %s %s: HTTP %d: %s", p.Name, method, pathOnly(uri), code, snippet(resp.Body()))
		}
		if check != nil {
			if err := check(resp.Body()); err != nil {
				return fmt.Errorf("%s: probe %s %s: %w: %s", p.Name, method, pathOnly(uri), err, snippet(resp.Body()))
			}
		}
		total += len(resp.Body())
	}
	p.RespSize = total / n
	return nil
}

func pathOnly(uri string) string {
	if i := strings.IndexByte(uri, '?'); i >= 0 {
		uri = uri[:i]
	}
	return uri
}

// hasKey is a probe check: the answer is a JSON object with key.
func hasKey(key string) func([]byte) error {
	return func(b []byte) error {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("answer is not a JSON object")
		}
		if _, ok := m[key]; !ok {
			return fmt.Errorf("answer has no %q", key)
		}
		return nil
	}
}

func setupStatus(env *Env) (*Workload, error) {
	uri := []byte("/api/status")
	p := Part{Name: "status", Weight: 1, FloorPath: "/api/status", Fill: func(req *fasthttp.Request, f *Filler) {
		req.Header.SetMethod("GET")
		req.SetRequestURIBytes(uri)
	}}
	if err := probe(env, &p, 3, hasKey("status")); err != nil {
		return nil, err
	}
	return NewWorkload("status", p), nil
}

// testTokens is the evaluate-test mix, by repetition.
var testTokens = []struct {
	token  string
	weight int
}{{"test_clean", 40}, {"test_vpn", 20}, {"test_datacenter", 20}, {"test_proxy", 10}, {"test_tor", 10}}

func setupEvaluateTest(env *Env) (*Workload, error) {
	acc, err := env.Admin.CreateAccount("evaluate-test", env.plan())
	if err != nil {
		return nil, err
	}
	env.logf("evaluate-test: account %s (%s)", acc.ID, acc.Plan)
	var bodies [][]byte
	for _, t := range testTokens {
		b := []byte(`{"token":"` + t.token + `"}`)
		for i := 0; i < t.weight; i++ {
			bodies = append(bodies, b)
		}
	}
	p := evaluatePart("evaluate-test", acc.LiveKey, bodies, NewCallerPool(fleetPrefix, 1, env.Rand))
	if err := probe(env, &p, 10, hasKey("decision")); err != nil {
		return nil, err
	}
	return NewWorkload("evaluate-test", p), nil
}

func evaluatePart(name, key string, bodies [][]byte, callers *CallerPool) Part {
	auth := bearer(key)
	uri := []byte("/v1/evaluate")
	return Part{Name: name, Weight: 1, FloorPath: "/v1/evaluate", Fill: func(req *fasthttp.Request, f *Filler) {
		req.Header.SetMethod("POST")
		req.SetRequestURIBytes(uri)
		req.Header.SetBytesKV(hdrAuth, auth)
		req.Header.SetBytesKV(hdrContentType, ctJSON)
		setXFF(&req.Header, f, callers.Next())
		req.SetBodyRaw(pickBody(f, bodies))
	}}
}

// liveBody is the evaluate request of evaluate-live.
type liveBody struct {
	Token     string `json:"token"`
	EventID   string `json:"fingerprintEventId,omitempty"`
	Email     string `json:"email,omitempty"`
	TZ        string `json:"tz,omitempty"`
	AccountID string `json:"accountId,omitempty"`
}

// deviceReport is what collector.js posts to /v1/collect/device for an
// ordinary desktop Chrome (the signal schema, version 1).
const deviceReport = `{"v":1,"ua":"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36","platform":"Win32","vendor":"Google Inc.","uad":{"brands":[{"brand":"Google Chrome","version":"131"},{"brand":"Chromium","version":"131"},{"brand":"Not_A Brand","version":"24"}],"mobile":false,"platform":"Windows"},"langs":["en-GB","en"],"wd":false,"plugins":5,"hc":16,"mem":8,"touch":0,"screen":[2560,1440,24,1],"win":[2560,1392,2560,1271],"tz":"Europe/London","tzo":0,"gl":{"vendor":"Google Inc. (NVIDIA)","renderer":"ANGLE (NVIDIA, NVIDIA GeForce RTX 3060 Ti (0x00002489) Direct3D11 vs_5_0 ps_5_0, D3D11)"},"canvas":["a1b2c3d4","a1b2c3d4"],"audio":["124.04347527516074","124.04347527516074"],"lies":[],"auto":[],"chrome":true,"np":"default","pq":"prompt","quota":306016419840,"heap":4294705152,"opfs":"ok","idb":"ok","sw":true,"brave":false,"timer":0.1,"pointer":"fine","motion":true,"err":[],"ms":61}`

// mintDevices posts a device event for about 70% of the visitors (the rest
// evaluate network-only) and returns the event ids by visitor index ("" for
// none). A server without /v1/collect/device gives no events.
func mintDevices(env *Env, pk string, visitors []Visitor) ([]string, error) {
	ids := make([]string, len(visitors))
	var body map[string]any
	if err := json.Unmarshal([]byte(deviceReport), &body); err != nil {
		return nil, err
	}
	body["key"] = pk
	for i, v := range visitors {
		if env.Rand.Float64() >= 0.70 {
			continue
		}
		// Each visitor's own screen, so each is its own device.
		body["screen"] = []int{1280 + 16*(i%64), 720 + 9*(i/64%64), 24, 1}
		b, _ := json.Marshal(body)
		status, out, err := call(env.Target, "POST", "/v1/collect/device", map[string]string{
			"X-Forwarded-For": v.Addr.String(), "Origin": "https://shop.example.com",
		}, b)
		if err != nil {
			return nil, fmt.Errorf("collect device: %w", err)
		}
		if status == 404 || status == 405 {
			env.logf("evaluate-live: /v1/collect/device answers %d: evaluating network-only", status)
			return ids, nil
		}
		if status != 200 {
			continue
		}
		var r struct {
			EventID string `json:"event_id"`
		}
		if json.Unmarshal(out, &r) == nil {
			ids[i] = r.EventID
		}
	}
	return ids, nil
}

var (
	emailDomains      = []string{"gmail.com", "outlook.com", "yahoo.com", "icloud.com", "proton.me", "gmx.de", "orange.fr", "hotmail.co.uk", "example-shop.com", "web.de"}
	disposableDomains = []string{"mailinator.com", "guerrillamail.com", "10minutemail.com", "temp-mail.org", "yopmail.com", "sharklasers.com"}
	allZones          = []string{"America/New_York", "Europe/Berlin", "Asia/Tokyo", "Europe/London", "America/Sao_Paulo", "Asia/Kolkata", "Australia/Sydney", "Europe/Paris"}
)

// liveFields draws the optional fields of a live evaluate: 80% send an email
// (6% of them disposable), 85% a time zone (10% of them not the network's),
// 60% an account id from 5,000 users.
func liveFields(r *rand.Rand, v Visitor) (email, tz, account string) {
	if r.Float64() < 0.80 {
		user := fmt.Sprintf("user%d", r.IntN(100000))
		if r.Float64() < 0.06 {
			email = user + "@" + disposableDomains[r.IntN(len(disposableDomains))]
		} else {
			email = user + "@" + emailDomains[r.IntN(len(emailDomains))]
		}
	}
	if r.Float64() < 0.85 {
		tz = v.Zone
		if r.Float64() < 0.10 {
			tz = allZones[r.IntN(len(allZones))]
		}
	}
	if r.Float64() < 0.60 {
		account = fmt.Sprintf("u_%05d", r.IntN(5000))
	}
	return
}

// mintTokens asks POST /v1/collect/network for network tokens, each as seen
// from one sampled visitor (X-Forwarded-For), with the publishable key.
func mintTokens(env *Env, pk string, n int) ([]string, []Visitor, error) {
	var tokens []string
	var visitors []Visitor
	refused := map[int]int{}
	body, _ := json.Marshal(map[string]string{"key": pk})
	for i := 0; i < n; i++ {
		v := sampleVisitor(env.Rand)
		status, out, err := call(env.Target, "POST", "/v1/collect/network", map[string]string{
			"X-Publishable-Key": pk,
			"X-Forwarded-For":   v.Addr.String(),
			"Origin":            "https://shop.example.com",
		}, body)
		if err != nil {
			return nil, nil, fmt.Errorf("mint network token: %w", err)
		}
		if status == 404 || status == 405 {
			return nil, nil, &Unavailable{Reason: fmt.Sprintf("endpoint not available (%d): POST /v1/collect/network (evaluate-live mints its network tokens there)", status)}
		}
		if status != 200 {
			refused[status]++
			if status >= 500 || (i > 20 && len(tokens) == 0) {
				return nil, nil, fmt.Errorf("mint network token: HTTP %d: %s", status, snippet(out))
			}
			continue
		}
		var tr struct {
			Token string `json:"token"`
		}
		if err := json.Unmarshal(out, &tr); err != nil || tr.Token == "" {
			return nil, nil, fmt.Errorf("mint network token: no token in %s", snippet(out))
		}
		tokens = append(tokens, tr.Token)
		visitors = append(visitors, v)
	}
	if len(refused) > 0 {
		env.logf("evaluate-live: collect refused %v (status: count); minted %d", refused, len(tokens))
	}
	if len(tokens) == 0 {
		return nil, nil, errors.New("mint network token: none minted")
	}
	return tokens, visitors, nil
}

func setupEvaluateLive(env *Env) (*Workload, error) {
	acc, err := env.Admin.CreateAccount("evaluate-live", env.plan())
	if err != nil {
		return nil, err
	}
	if acc.PublishableKey == "" {
		return nil, errors.New("evaluate-live: the account has no publishable_key")
	}
	n := env.LiveTokens
	if n <= 0 {
		n = 1000
	}
	start := time.Now()
	tokens, visitors, err := mintTokens(env, acc.PublishableKey, n)
	if err != nil {
		return nil, err
	}
	mix := map[string]int{}
	for _, v := range visitors {
		mix[v.Class]++
	}
	env.logf("evaluate-live: account %s (%s); %d network tokens in %v: %s", acc.ID, acc.Plan, len(tokens), time.Since(start).Round(time.Millisecond), formatMix(mix))
	events, err := mintDevices(env, acc.PublishableKey, visitors)
	if err != nil {
		return nil, err
	}
	withDevice := 0
	for _, e := range events {
		if e != "" {
			withDevice++
		}
	}
	env.logf("evaluate-live: %d device events", withDevice)
	bodies := make([][]byte, 0, 4096)
	for i := 0; i < 4096; i++ {
		k := i % len(tokens)
		email, tz, account := liveFields(env.Rand, visitors[k])
		b, _ := json.Marshal(liveBody{Token: tokens[k], EventID: events[k], Email: email, TZ: tz, AccountID: account})
		bodies = append(bodies, b)
	}
	p := evaluatePart("evaluate-live", acc.LiveKey, bodies, NewCallerPool(fleetPrefix, 1, env.Rand))
	if err := probe(env, &p, 20, hasKey("decision")); err != nil {
		return nil, err
	}
	return NewWorkload("evaluate-live", p), nil
}

func formatMix(m map[string]int) string {
	var parts []string
	for _, c := range visitorClasses {
		if m[c.name] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", c.name, m[c.name]))
		}
	}
	return strings.Join(parts, ", ")
}

// visitorAddrs draws n addresses from the visitor mix.
func visitorAddrs(r *rand.Rand, n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = sampleVisitor(r).Addr
	}
	return out
}

func setupLookup(env *Env) (*Workload, error) {
	acc, err := env.Admin.CreateAccount("lookup", env.plan())
	if err != nil {
		return nil, err
	}
	env.logf("lookup: account %s (%s)", acc.ID, acc.Plan)
	var uris [][]byte
	for _, a := range visitorAddrs(env.Rand, 4096) {
		uris = append(uris, []byte("/v1/lookup/"+a.String()))
	}
	auth := bearer(acc.LiveKey)
	callers := NewCallerPool(fleetPrefix, 1, env.Rand)
	p := Part{Name: "lookup", Weight: 1, FloorPath: "/v1/lookup/", Fill: func(req *fasthttp.Request, f *Filler) {
		req.Header.SetMethod("GET")
		req.SetRequestURIBytes(uris[f.Rand.IntN(len(uris))])
		req.Header.SetBytesKV(hdrAuth, auth)
		setXFF(&req.Header, f, callers.Next())
	}}
	if err := probe(env, &p, 20, hasKey("verdict")); err != nil {
		return nil, err
	}
	return NewWorkload("lookup", p), nil
}

func setupFreeLookup(env *Env) (*Workload, error) {
	var bodies [][]byte
	for _, a := range visitorAddrs(env.Rand, 4096) {
		b, _ := json.Marshal(map[string]string{"ip": a.String()})
		bodies = append(bodies, b)
	}
	// 12/minute per caller: 8 requests per address, then the next one.
	callers := NewCallerPool(publicPrefix, 8, env.Rand)
	uri := []byte("/api/lookup")
	p := Part{Name: "free-lookup", Weight: 1, FloorPath: "/api/lookup", Fill: func(req *fasthttp.Request, f *Filler) {
		req.Header.SetMethod("POST")
		req.SetRequestURIBytes(uri)
		req.Header.SetBytesKV(hdrContentType, ctJSON)
		setXFF(&req.Header, f, callers.Next())
		req.SetBodyRaw(pickBody(f, bodies))
	}}
	if err := probe(env, &p, 20, hasKey("verdict")); err != nil {
		return nil, err
	}
	return NewWorkload("free-lookup", p), nil
}

func setupUsage(env *Env) (*Workload, error) {
	acc, err := env.Admin.CreateAccount("usage", env.plan())
	if err != nil {
		return nil, err
	}
	env.logf("usage: account %s (%s)", acc.ID, acc.Plan)
	live, test := bearer(acc.LiveKey), bearer(acc.TestKey)
	// 120 reads/minute per address: 50 per address, then the next one.
	callers := NewCallerPool(netip.MustParsePrefix("198.18.0.0/16"), 50, env.Rand)
	uri := []byte("/v1/usage")
	p := Part{Name: "usage", Weight: 1, FloorPath: "/v1/usage", Fill: func(req *fasthttp.Request, f *Filler) {
		req.Header.SetMethod("GET")
		req.SetRequestURIBytes(uri)
		if f.Rand.IntN(5) == 0 {
			req.Header.SetBytesKV(hdrAuth, test)
		} else {
			req.Header.SetBytesKV(hdrAuth, live)
		}
		setXFF(&req.Header, f, callers.Next())
	}}
	if err := probe(env, &p, 5, hasKey("key_type")); err != nil {
		return nil, err
	}
	return NewWorkload("usage", p), nil
}

func setupOAuth(env *Env) (*Workload, error) {
	acc, err := env.Admin.CreateAccount("oauth", env.plan())
	if err != nil {
		return nil, err
	}
	env.logf("oauth: account %s (%s)", acc.ID, acc.Plan)
	body := []byte("grant_type=client_credentials&client_id=" + formEscape(acc.Email) + "&client_secret=" + formEscape(acc.LiveKey))
	// 60 exchanges/minute per address: 30 per address.
	callers := NewCallerPool(netip.MustParsePrefix("198.19.0.0/16"), 30, env.Rand)
	uri := []byte("/oauth/token")
	p := Part{Name: "oauth", Weight: 1, FloorPath: "/oauth/token", Fill: func(req *fasthttp.Request, f *Filler) {
		req.Header.SetMethod("POST")
		req.SetRequestURIBytes(uri)
		req.Header.SetBytesKV(hdrContentType, ctForm)
		setXFF(&req.Header, f, callers.Next())
		req.SetBodyRaw(body)
	}}
	if err := probe(env, &p, 3, hasKey("access_token")); err != nil {
		return nil, err
	}
	return NewWorkload("oauth", p), nil
}

func formEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func setupMCP(env *Env) (*Workload, error) {
	acc, err := env.Admin.CreateAccount("mcp", env.plan())
	if err != nil {
		return nil, err
	}
	env.logf("mcp: account %s (%s)", acc.ID, acc.Plan)
	var bodies [][]byte
	for i, a := range visitorAddrs(env.Rand, 2048) {
		b, _ := json.Marshal(map[string]any{
			"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
			"params": map[string]any{"name": "lookup_ip", "arguments": map[string]string{"ip": a.String()}},
		})
		bodies = append(bodies, b)
	}
	auth := bearer(acc.LiveKey)
	accept := []byte("application/json, text/event-stream")
	callers := NewCallerPool(fleetPrefix, 1, env.Rand)
	uri := []byte("/mcp")
	p := Part{Name: "mcp", Weight: 1, FloorPath: "/mcp", Fill: func(req *fasthttp.Request, f *Filler) {
		req.Header.SetMethod("POST")
		req.SetRequestURIBytes(uri)
		req.Header.SetBytesKV(hdrAuth, auth)
		req.Header.SetBytesKV(hdrContentType, ctJSON)
		req.Header.SetBytesV("Accept", accept)
		setXFF(&req.Header, f, callers.Next())
		req.SetBodyRaw(pickBody(f, bodies))
	}}
	check := func(b []byte) error {
		if !strings.Contains(string(b), `"result"`) {
			return errors.New("no JSON-RPC result")
		}
		return nil
	}
	if err := probe(env, &p, 3, check); err != nil {
		return nil, err
	}
	return NewWorkload("mcp", p), nil
}

func setupMixed(env *Env) (*Workload, error) {
	w := &Workload{Name: "mixed"}
	for _, mw := range mixedWeights {
		sub, err := mw.setup(env)
		if IsUnavailable(err) {
			w.Notes = append(w.Notes, fmt.Sprintf("%s dropped from the mix (weight %g): %v", mw.name, mw.weight, err))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("mixed: %w", err)
		}
		total := 0.0
		for _, p := range sub.Parts {
			total += p.Weight
		}
		for _, p := range sub.Parts {
			p.Weight = mw.weight * p.Weight / total
			w.Parts = append(w.Parts, p)
		}
	}
	if len(w.Parts) == 0 {
		return nil, &Unavailable{Reason: "no part of the mix is available"}
	}
	w.prepare()
	return w, nil
}
