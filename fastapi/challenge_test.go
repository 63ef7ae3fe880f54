package fastapi

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/challenge"
	"github.com/fraudd/fraudd/intel/evidence"
	"github.com/fraudd/fraudd/internal/clock"
)

func newChallengeEnv(t *testing.T, beta bool, origins ...string) *collectEnv {
	t.Helper()
	e := newCollectEnv(t)
	sys := actor.NewActorSystem()
	ch := challenge.New(sys.Root, challenge.Config{Shards: 2, Key: []byte("unit")})
	t.Cleanup(func() { ch.Stop(); sys.Shutdown() })
	e.srv.deps.Challenges = ch
	e.srv.rewire()
	if _, err := e.accts.Update(e.acct.View.ID, accounts.Patch{DeviceEvidenceBeta: &beta, Origins: &origins}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *collectEnv) challenge(key, event string) (int, map[string]any, string) {
	body := fmt.Sprintf(`{"fingerprintEventId":%q}`, event)
	ctx := e.post("/v1/device-evidence/challenge", "Bearer "+key, "application/json", body)
	var m map[string]any
	json.Unmarshal(ctx.Response.Body(), &m)
	return ctx.Response.StatusCode(), m, string(ctx.Response.Header.Peek("Retry-After"))
}

func gpuBody(ch string, v float64) map[string]any {
	f := make([]float64, evidence.Features)
	for i := range f {
		f[i] = v
	}
	return map[string]any{"challenge": ch, "protocol": evidence.GPUProtocol, "features": f}
}

func TestChallengeRoute(t *testing.T) {
	e := newChallengeEnv(t, true, "https://shop.example")
	pk, live := e.acct.PublishableKey, e.acct.LiveKey
	ev := e.deviceEvent(t, pk, "73.0.0.1:1", "chrome_desktop_windows")

	st, m, _ := e.challenge(live, ev)
	if st != 200 || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(m["challenge"].(string)) ||
		m["protocol"] != evidence.GPUProtocol || m["consistency_protocol"] != evidence.ConsistencyProtocol ||
		m["experimental"] != true || m["expires_at"] != fixedNow.Add(2*time.Minute).UTC().Format(time.RFC3339) {
		t.Fatalf("200: %d %v", st, m)
	}
	if st, m, _ := e.challenge(e.acct.TestKey, ev); st != 401 || m["error"] != "live key required" {
		t.Fatalf("test key: %d %v", st, m)
	}
	if st, _, _ := e.challenge(SandboxKey, ev); st != 401 {
		t.Fatalf("sandbox key: %d", st)
	}
	for _, body := range []string{`{}`, `{"fingerprintEventId":"short"}`, `{"fingerprintEventId":` + fmt.Sprintf("%q", strings.Repeat("x", 201)) + `}`, `{"fingerprintEventId":7}`, `nope`} {
		if ctx := e.post("/v1/device-evidence/challenge", "Bearer "+live, "application/json", body); ctx.Response.StatusCode() != 400 {
			t.Fatalf("%s: %d", body, ctx.Response.StatusCode())
		}
	}
	if st, _, _ := e.challenge(live, "ev_00000000000000000000000000000000"); st != 422 {
		t.Fatalf("unknown event: %d", st)
	}
	if st, _, _ := e.challenge(live, "not-an-event-id"); st != 422 {
		t.Fatalf("malformed event: %d", st)
	}
	// Older than 5 minutes.
	e.srv.deps.Clock = clock.Fixed{T: fixedNow.Add(5*time.Minute + time.Second)}
	if st, _, _ := e.challenge(live, ev); st != 422 {
		t.Fatalf("old event: %d", st)
	}
	e.srv.deps.Clock = clock.Fixed{T: fixedNow}
	// Wrong origin.
	other := []string{"https://other.example"}
	e.accts.Update(e.acct.View.ID, accounts.Patch{Origins: &other})
	if st, m, _ := e.challenge(live, ev); st != 422 || m["hint"] == nil {
		t.Fatalf("wrong origin: %d %v", st, m)
	}
	// Beta off: 409 and purged.
	off := false
	e.accts.Update(e.acct.View.ID, accounts.Patch{DeviceEvidenceBeta: &off})
	if st, _, _ := e.challenge(live, ev); st != 409 {
		t.Fatalf("beta off: %d", st)
	}
	if n, _ := e.srv.deps.Challenges.Counts(e.acct.View.ID); n != (challenge.Counts{}) {
		t.Fatalf("not purged: %+v", n)
	}
	// Store trouble: 503 with Retry-After.
	on, origins := true, []string{"https://shop.example/"}
	e.accts.Update(e.acct.View.ID, accounts.Patch{DeviceEvidenceBeta: &on, Origins: &origins})
	saved := e.srv.deps.Challenges
	e.srv.deps.Challenges = nil
	e.srv.rewire()
	if st, _, ra := e.challenge(live, ev); st != 503 || ra == "" {
		t.Fatalf("unavailable: %d %q", st, ra)
	}
	e.srv.deps.Challenges = saved
	e.srv.rewire()
	// 50 outstanding → 409; after they expire, 60 an hour → 429.
	n := 0
	for ; n < 50; n++ {
		if st, _, _ := e.challenge(live, ev); st != 200 {
			t.Fatalf("challenge %d: %d", n, st)
		}
	}
	if st, m, _ := e.challenge(live, ev); st != 409 || m["code"] != "too_many_outstanding_challenges" {
		t.Fatalf("51 outstanding: %d %v", st, m)
	}
}

func TestChallengeHourlyLimit(t *testing.T) {
	e := newChallengeEnv(t, true, "https://shop.example")
	ev := e.deviceEvent(t, e.acct.PublishableKey, "73.0.0.1:1", "chrome_desktop_windows")
	for i := range 50 {
		if st, _, _ := e.challenge(e.acct.LiveKey, ev); st != 200 {
			t.Fatalf("challenge %d: %d", i, st)
		}
	}
	// The 50 expire; 10 more fit the hour, the 61st is 429 with Retry-After.
	e.srv.deps.Clock = clock.Fixed{T: fixedNow.Add(2*time.Minute + time.Second)}
	for i := range 10 {
		if st, _, _ := e.challenge(e.acct.LiveKey, ev); st != 200 {
			t.Fatalf("challenge %d: %d", 50+i, st)
		}
	}
	if st, m, ra := e.challenge(e.acct.LiveKey, ev); st != 429 || ra != "3479" || m["code"] != "challenge_rate_limited" {
		t.Fatalf("61st: %d %q %v", st, ra, m)
	}
}

func TestEvaluateWithGPUEvidence(t *testing.T) {
	e := newChallengeEnv(t, true, "https://shop.example")
	pk, live := e.acct.PublishableKey, e.acct.LiveKey
	tok := e.token(t, pk, "73.0.0.1:1", map[string]string{"Origin": "https://shop.example"}, `{"v":1,"key":"PK"}`)
	ev := e.deviceEvent(t, pk, "73.0.0.1:1", "chrome_desktop_windows")
	_, c, _ := e.challenge(live, ev)
	ch := c["challenge"].(string)

	gpuOf := func(m map[string]any) map[string]any {
		d, _ := m["device"].(map[string]any)
		g, _ := d["gpu_evidence"].(map[string]any)
		return g
	}
	// Invalid evidence does not consume the challenge.
	bad := gpuBody(ch, 2)
	if _, m, raw := e.evaluate(t, live, map[string]any{"token": tok, "fingerprintEventId": ev, "gpuEvidence": bad}); gpuOf(m)["status"] != "invalid" {
		t.Fatalf("invalid: %s", raw)
	}
	_, m, raw := e.evaluate(t, live, map[string]any{"token": tok, "fingerprintEventId": ev, "gpuEvidence": gpuBody(ch, 0.5)})
	if gpuOf(m)["status"] != "recorded" || m["decision"] != "allow" {
		t.Fatalf("recorded: %s", raw)
	}
	if _, m, raw := e.evaluate(t, live, map[string]any{"token": tok, "fingerprintEventId": ev, "gpuEvidence": gpuBody(ch, 0.5)}); gpuOf(m)["status"] != "expired_or_used" {
		t.Fatalf("second use: %s", raw)
	}
	// A second device: nearest is the first, with its RMS distance.
	ev2 := e.deviceEvent(t, pk, "73.0.0.1:1", "brave_macos")
	_, c, _ = e.challenge(live, ev2)
	_, m, raw = e.evaluate(t, live, map[string]any{"token": tok, "fingerprintEventId": ev2, "gpuEvidence": gpuBody(c["challenge"].(string), 0.25)})
	if g := gpuOf(m); g["status"] != "recorded" || g["nearest_device"] == nil || g["rms_distance"] != 0.25 {
		t.Fatalf("nearest: %s", raw)
	}
	// Beta off: disabled, and the samples are gone.
	off := false
	e.accts.Update(e.acct.View.ID, accounts.Patch{DeviceEvidenceBeta: &off})
	if _, m, raw := e.evaluate(t, live, map[string]any{"token": tok, "fingerprintEventId": ev2, "gpuEvidence": gpuBody(ch, 0.5)}); gpuOf(m)["status"] != "disabled" {
		t.Fatalf("disabled: %s", raw)
	}
	if n, _ := e.srv.deps.Challenges.Counts(e.acct.View.ID); n.Devices != 0 {
		t.Fatalf("samples kept after disable: %+v", n)
	}
}

func browserBody(ch, workerOS, webgl string) map[string]any {
	claim := map[string]any{"browser": "chromium", "os": "windows"}
	return map[string]any{
		"protocol": evidence.ConsistencyProtocol, "challenge": ch,
		"page":         []any{claim, claim},
		"worker":       []any{map[string]any{"browser": "chromium", "os": workerOS}, nil},
		"graphics":     map[string]any{"webgl": webgl, "webgpu": webgl, "fallback": false},
		"computations": []any{nil, nil},
	}
}

func TestEvaluateWithBrowserEvidence(t *testing.T) {
	e := newChallengeEnv(t, true, "https://shop.example")
	pk, live := e.acct.PublishableKey, e.acct.LiveKey
	tok := e.token(t, pk, "73.0.0.1:1", map[string]string{"Origin": "https://shop.example"}, `{"v":1,"key":"PK"}`)
	bcOf := func(m map[string]any) map[string]any {
		d, _ := m["device"].(map[string]any)
		b, _ := d["browser_consistency"].(map[string]any)
		return b
	}
	ev := e.deviceEvent(t, pk, "73.0.0.1:1", "chrome_desktop_windows")
	_, c, _ := e.challenge(live, ev)
	ch := c["challenge"].(string)
	// Both sent: browser evidence takes precedence; consistent stays allow.
	_, m, raw := e.evaluate(t, live, map[string]any{"token": tok, "fingerprintEventId": ev,
		"browserEvidence": browserBody(ch, "windows", "nvidia"), "gpuEvidence": gpuBody(ch, 0.5)})
	b := bcOf(m)
	if b["status"] != "consistent" || b["experimental"] != true || b["source"] != "browser_reported" ||
		b["affects_decision"] != false || len(b["findings"].([]any)) != 0 || len(b["checks"].([]any)) == 0 ||
		m["device"].(map[string]any)["gpu_evidence"] != nil || m["decision"] != "allow" {
		t.Fatalf("consistent: %s", raw)
	}
	if _, m, raw := e.evaluate(t, live, map[string]any{"token": tok, "fingerprintEventId": ev, "browserEvidence": browserBody(ch, "windows", "nvidia")}); bcOf(m)["status"] != "replay" {
		t.Fatalf("replay: %s", raw)
	}
	// Page says Windows, worker says macOS, graphics Apple: gpu_inconsistent → review.
	ev2 := e.deviceEvent(t, pk, "73.0.0.1:1", "chrome_desktop_windows")
	_, c, _ = e.challenge(live, ev2)
	_, m, raw = e.evaluate(t, live, map[string]any{"token": tok, "fingerprintEventId": ev2, "browserEvidence": browserBody(c["challenge"].(string), "macos", "apple")})
	if b := bcOf(m); b["status"] != "inconsistent" || fmt.Sprint(b["findings"]) != "[gpu_inconsistent]" || m["decision"] != "review" || !collectHasReason(m, "gpu_inconsistent") {
		t.Fatalf("inconsistent: %s", raw)
	}
	if _, m, raw := e.evaluate(t, live, map[string]any{"token": tok, "fingerprintEventId": ev2, "browserEvidence": map[string]any{"protocol": "x"}}); bcOf(m)["status"] != "invalid" {
		t.Fatalf("invalid: %s", raw)
	}
}

func TestChallengeSuspensionAndAllowlist(t *testing.T) {
	e := newChallengeEnv(t, true, "https://shop.example")
	ev := e.deviceEvent(t, e.acct.PublishableKey, "73.0.0.1:1", "chrome_desktop_windows")
	allow := []string{"203.0.113.7/32"}
	e.accts.Update(e.acct.View.ID, accounts.Patch{Allowlist: &allow})
	if st, _, _ := e.challenge(e.acct.LiveKey, ev); st != 403 {
		t.Fatalf("allowlist: %d", st)
	}
	none, yes := []string{}, true
	e.accts.Update(e.acct.View.ID, accounts.Patch{Allowlist: &none, Suspended: &yes})
	if st, _, _ := e.challenge(e.acct.LiveKey, ev); st != 403 {
		t.Fatalf("suspended: %d", st)
	}
}

func TestEvidenceWithoutDeviceOrChallenge(t *testing.T) {
	e := newChallengeEnv(t, true, "https://shop.example")
	live := e.acct.LiveKey
	tok := e.token(t, e.acct.PublishableKey, "73.0.0.1:1", map[string]string{"Origin": "https://shop.example"}, `{"v":1,"key":"PK"}`)
	// No resolvable event: no device object, nothing consumed, still 200.
	st, m, raw := e.evaluate(t, live, map[string]any{"token": tok, "fingerprintEventId": "ev_00000000000000000000000000000000",
		"gpuEvidence": gpuBody(strings.Repeat("a", 64), 0.5)})
	if st != 200 || m["device"] != nil {
		t.Fatalf("no device: %d %s", st, raw)
	}
	// A well-formed challenge never issued: expired_or_used.
	ev := e.deviceEvent(t, e.acct.PublishableKey, "73.0.0.1:1", "chrome_desktop_windows")
	_, m, raw = e.evaluate(t, live, map[string]any{"token": tok, "fingerprintEventId": ev, "gpuEvidence": gpuBody(strings.Repeat("a", 64), 0.5)})
	if g := m["device"].(map[string]any)["gpu_evidence"].(map[string]any); g["status"] != "expired_or_used" || g["nearest_device"] != nil {
		t.Fatalf("never issued: %s", raw)
	}
	// A challenge of another event does not fit this one.
	ev2 := e.deviceEvent(t, e.acct.PublishableKey, "73.0.0.1:1", "brave_macos")
	_, c, _ := e.challenge(live, ev2)
	_, m, raw = e.evaluate(t, live, map[string]any{"token": tok, "fingerprintEventId": ev, "gpuEvidence": gpuBody(c["challenge"].(string), 0.5)})
	if m["device"].(map[string]any)["gpu_evidence"].(map[string]any)["status"] != "expired_or_used" {
		t.Fatalf("other event's challenge: %s", raw)
	}
	// Without evidence the device object carries neither block.
	ev3 := e.deviceEvent(t, e.acct.PublishableKey, "73.0.0.1:1", "brave_macos")
	_, _, raw = e.evaluate(t, live, map[string]any{"token": tok, "fingerprintEventId": ev3})
	if strings.Contains(string(raw), "gpu_evidence") || strings.Contains(string(raw), "browser_consistency") {
		t.Fatalf("blocks without evidence: %s", raw)
	}
}

func TestBrowserEvidenceRandomizationNeedsAccount(t *testing.T) {
	e := newChallengeEnv(t, true, "https://shop.example")
	live := e.acct.LiveKey
	tok := e.token(t, e.acct.PublishableKey, "73.0.0.1:1", map[string]string{"Origin": "https://shop.example"}, `{"v":1,"key":"PK"}`)
	// Three devices, so no single device shows a burst of profiles.
	send := func(reading int, account, fixture string) map[string]any {
		ev := e.deviceEvent(t, e.acct.PublishableKey, "73.0.0.1:1", fixture)
		_, c, _ := e.challenge(live, ev)
		b := browserBody(c["challenge"].(string), "windows", "nvidia")
		comp := make([]int, evidence.ComputationLen)
		comp[0] = reading
		b["computations"] = []any{comp, nil}
		body := map[string]any{"token": tok, "fingerprintEventId": ev, "browserEvidence": b}
		if account != "" {
			body["accountId"] = account
		}
		_, m, _ := e.evaluate(t, live, body)
		return m
	}
	if m := send(1, "user-1", "chrome_desktop_windows"); m["decision"] != "allow" {
		t.Fatalf("first reading: %v", m)
	}
	if m := send(2, "", "brave_macos"); m["decision"] != "allow" {
		t.Fatalf("no accountId: %v", m)
	}
	m := send(3, "user-1", "chrome_incognito")
	b := m["device"].(map[string]any)["browser_consistency"].(map[string]any)
	if m["decision"] != "review" || !collectHasReason(m, "antidetect_randomization") ||
		fmt.Sprint(b["findings"]) != "[antidetect_randomization]" || b["affects_decision"] != false {
		t.Fatalf("randomization: %v", m)
	}
}

// SPEC §3: a challenge needs a device event "under 5 minutes" old; one
// exactly 5 minutes old is old (422).
func TestChallengeEventExactlyFiveMinutesOld(t *testing.T) {
	e := newChallengeEnv(t, true, "https://shop.example")
	ev := e.deviceEvent(t, e.acct.PublishableKey, "73.0.0.1:1", "chrome_desktop_windows")
	e.srv.deps.Clock = clock.Fixed{T: fixedNow.Add(5*time.Minute - time.Second)}
	if st, _, _ := e.challenge(e.acct.LiveKey, ev); st != 200 {
		t.Fatalf("4:59 old: %d", st)
	}
	e.srv.deps.Clock = clock.Fixed{T: fixedNow.Add(5 * time.Minute)}
	if st, m, _ := e.challenge(e.acct.LiveKey, ev); st != 422 {
		t.Fatalf("5:00 old: %d %v", st, m)
	}
}

// TestChallengeEventIDExactName: the body's fingerprintEventId is read by its
// exact name, as every other API body is (jsonBody): SPEC 4.10 answers 400
// for a missing id, and {"FingerprintEventID": …} carries none. It used to be
// read case-insensitively (encoding/json) and issued a challenge.
func TestChallengeEventIDExactName(t *testing.T) {
	e := newChallengeEnv(t, true, "https://shop.example")
	live := e.acct.LiveKey
	ev := e.deviceEvent(t, e.acct.PublishableKey, "73.0.0.1:1", "chrome_desktop_windows")
	for _, body := range []string{
		fmt.Sprintf(`{"FingerprintEventID":%q}`, ev),
		fmt.Sprintf(`{"fingerprintEventID":%q}`, ev),
		fmt.Sprintf(`{"FINGERPRINTEVENTID":%q}`, ev),
	} {
		ctx := e.post("/v1/device-evidence/challenge", "Bearer "+live, "application/json", body)
		if ctx.Response.StatusCode() != 400 || !strings.Contains(string(ctx.Response.Body()), "fingerprintEventId is required") {
			t.Fatalf("%q: %d %s", body, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	// The exact name still works, and an unknown member beside it is ignored.
	body := fmt.Sprintf(`{"fingerprintEventId":%q,"FingerprintEventID":"other"}`, ev)
	if ctx := e.post("/v1/device-evidence/challenge", "Bearer "+live, "application/json", body); ctx.Response.StatusCode() != 200 {
		t.Fatalf("exact name: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}
