package checks

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/intel/device"
	"github.com/fraudd/fraudd/intel/nettoken"
)

// TestChargeTable: what each kind of evaluate and lookup counts toward, by
// the key that asked (the charge table of admit.go).
func TestChargeTable(t *testing.T) {
	codec := nettoken.New([]byte("network-token-unit-key-000000000"))
	ts := newTestService(t, Config{NetTokens: codec})
	f := nettoken.Facts{Issued: fixedNow, Addr: netip.MustParseAddr("73.0.0.1"), Report: true}
	tok := codec.Sign("acc_unit", &f)
	for _, c := range []struct {
		name             string
		key              accounts.KeyKind
		req              EvalRequest
		target           *Target // a lookup instead of an evaluate
		status           int     // 0: answered
		bucket           quota.Bucket
		kind             quota.Kind
		monthly, total   bool
		countTotalsAfter int
	}{
		{name: "network token, live key", key: accounts.KeyLive, req: EvalRequest{Token: tok}, bucket: quota.Live, kind: quota.Evaluate, monthly: true, total: true},
		{name: "network token, previous live key", key: accounts.KeyLivePrev, req: EvalRequest{Token: tok}, bucket: quota.Live, kind: quota.Evaluate, monthly: true, total: true},
		{name: "network token, test key", key: accounts.KeyTest, req: EvalRequest{Token: tok}, bucket: quota.Test, kind: quota.Evaluate, monthly: true},
		{name: "test token, live key", key: accounts.KeyLive, req: EvalRequest{Token: "test_vpn"}, bucket: quota.Live, kind: quota.Evaluate},
		{name: "test token, test key", key: accounts.KeyTest, req: EvalRequest{Token: "test_tor"}, bucket: quota.Test, kind: quota.Evaluate},
		{name: "bare degraded allow", key: accounts.KeyLive, bucket: quota.Live, kind: quota.Evaluate, monthly: true},
		{name: "degraded with a reason", key: accounts.KeyLive, req: EvalRequest{Email: "a@mailinator.com", EmailSent: true},
			bucket: quota.Live, kind: quota.Evaluate, monthly: true, countTotalsAfter: 1},
		{name: "degraded with a reason, test key", key: accounts.KeyTest, req: EvalRequest{Email: "a@mailinator.com", EmailSent: true},
			bucket: quota.Test, kind: quota.Evaluate, monthly: true},
		{name: "tampered token", key: accounts.KeyLive, req: EvalRequest{Token: tok + "x"}, status: 400, bucket: quota.Live, kind: quota.Evaluate},
		{name: "undecodable body", key: accounts.KeyLive, req: EvalRequest{Err: errors.New(MsgBodyNotJSON)}, status: 400, bucket: quota.Live, kind: quota.Evaluate},
		{name: "lookup, live key", key: accounts.KeyLive, target: ptr(PathTarget("52.95.110.1")), bucket: quota.Live, kind: quota.Lookup, monthly: true, total: true},
		{name: "lookup, test key", key: accounts.KeyTest, target: ptr(PathTarget("52.95.110.1")), bucket: quota.Test, kind: quota.Lookup, monthly: true},
		{name: "lookup of a private address", key: accounts.KeyLive, target: ptr(PathTarget("10.0.0.1")), status: 400, bucket: quota.Live, kind: quota.Lookup},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts.quota.charges, ts.quota.totals = nil, 0
			c.req.TokenSent = c.req.Token != ""
			var ref *Refusal
			if c.target != nil {
				_, ref = ts.Lookup(ts.call(c.key), *c.target)
			} else {
				var ev *Evaluation
				ev, ref = ts.Evaluate(ts.call(c.key), &c.req)
				if ev != nil {
					ev.Release()
				}
			}
			if got := status(ref); got != c.status {
				t.Fatalf("status %d, want %d (%+v)", got, c.status, ref)
			}
			if len(ts.quota.charges) != 1 {
				t.Fatalf("%d charges, want 1", len(ts.quota.charges))
			}
			ch := ts.quota.charges[0]
			if ch.Bucket != c.bucket || ch.Kind != c.kind || !ch.Hourly || ch.Monthly != c.monthly || ch.Total != c.total || ch.Account != "acc_unit" {
				t.Fatalf("charge %+v", ch)
			}
			if ts.quota.totals != c.countTotalsAfter {
				t.Fatalf("%d totals counted after scoring, want %d", ts.quota.totals, c.countTotalsAfter)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func status(ref *Refusal) int {
	if ref == nil {
		return 0
	}
	return ref.Status
}

// TestRefusedChargeCostsNothingElse: a call the quota refuses resolves,
// records and notifies nothing, and its refusal carries the figures.
func TestRefusedChargeCostsNothingElse(t *testing.T) {
	rec := &recorder{}
	ts := newTestService(t, Config{Traffic: rec, Webhooks: rec, History: rec})
	ts.accounts.view.WebhookURL = "https://hooks.example/x"
	ts.quota.result = quota.ChargeResult{Refusal: quota.RefusedHourly, Capped: true, Limit: 5000, Remaining: 0, Reset: 1795352400, RetryAfter: 42}
	c := ts.call(accounts.KeyLive)
	_, ref := ts.Evaluate(c, &EvalRequest{Token: "test_tor", TokenSent: true, AccountID: "user-1"})
	want := Refusal{Status: 429, Msg: MsgHourly, Hint: HintHourly, RetryAfter: 42, RateLimit: RateLimit{Capped: true, Limit: 5000, Reset: 1795352400}}
	if ref == nil || *ref != want {
		t.Fatalf("refusal %+v, want %+v", ref, want)
	}
	if c.RateLimit != want.RateLimit {
		t.Fatalf("call's rate limit %+v", c.RateLimit)
	}
	ts.quota.result = quota.ChargeResult{Refusal: quota.RefusedMonthly, RetryAfter: 99}
	if _, ref := ts.Evaluate(ts.call(accounts.KeyLive), &EvalRequest{AccountID: "user-1"}); ref == nil || ref.Code != CodeMonthly || ref.RetryAfter != 99 {
		t.Fatalf("monthly: %+v", ref)
	}
	ts.quota.err = errors.New("disk gone")
	if _, ref := ts.Lookup(ts.call(accounts.KeyLive), PathTarget("1.1.1.1")); ref == nil || ref.Status != 503 || ref.Code != CodeStorage || ref.Cause == nil {
		t.Fatalf("charge error: %+v", ref)
	}
	if rec.traffic+rec.webhooks+rec.observed != 0 {
		t.Fatalf("a refused call recorded %+v", rec)
	}
	// The same call, allowed: the visitor check observes, records and notifies.
	ts.quota.result, ts.quota.err = quota.ChargeResult{}, nil
	ev, ref := ts.Evaluate(ts.call(accounts.KeyLive), &EvalRequest{AccountID: "user-1", Email: "a@mailinator.com", EmailSent: true})
	if ref != nil {
		t.Fatal(ref.Msg)
	}
	ev.Release()
	if rec.observed != 1 || rec.traffic != 1 {
		t.Fatalf("allowed call: %+v", rec)
	}
}

// TestAdmit: the admission table's refusals and the limiters each access
// takes in its one iplimit hop.
func TestAdmit(t *testing.T) {
	store := &storeHealth{ok: true}
	ts := newTestService(t, Config{Store: store})
	addr := netip.MustParseAddr("73.0.0.1")
	admit := func(key string, a Access) (*Call, *Refusal) {
		ts.limits.taken = nil
		c := &Call{Addr: addr, Now: fixedNow}
		ref := ts.Admit(c, Credential{Key: key, Hint: HintNoAuthorization}, a)
		if ref == nil && c.limits != 0 {
			// A chained access leaves its limiters to the charge's call.
			if !a.Chained || len(ts.limits.taken) != 0 {
				t.Fatalf("%+v left limiters %v after taking %v", a, c.limits, ts.limits.taken)
			}
			ref = ts.charge(c, lookupAnswered)
		}
		return c, ref
	}
	if c, ref := admit("sk_live_unit", AccessLookup); ref != nil || c.Auth.View == nil || c.Auth.Kind != accounts.KeyLive ||
		ts.limits.taken[0] != iplimit.Of(iplimit.AuthFail, iplimit.Protect) {
		t.Fatalf("live key: %+v %v", ref, ts.limits.taken)
	}
	if _, ref := admit("sk_test_unit", AccessUsage); ref != nil || ts.limits.taken[0] != iplimit.Of(iplimit.AuthFail, iplimit.Protect, iplimit.Usage) {
		t.Fatalf("usage: %+v %v", ref, ts.limits.taken)
	}
	if _, ref := admit("", AccessEvaluate); ref == nil || ref.Status != 401 || ref.Msg != MsgMissingKey || ref.Hint != HintNoAuthorization ||
		ts.limits.taken[0] != iplimit.Of(iplimit.AuthFail) {
		t.Fatalf("no key: %+v %v", ref, ts.limits.taken)
	}
	fails := ts.limits.fails
	if _, ref := admit("undefined", AccessEvaluate); ref == nil || ref.Status != 401 || ref.Hint != `The key is the literal string "undefined": the variable meant to hold your API key is not set.` || ts.limits.fails != fails+1 {
		t.Fatalf("invalid key: %+v", ref)
	}
	if c, ref := admit(SandboxKey, AccessEvaluate); ref != nil || !c.Sandbox || c.Auth.View != nil {
		t.Fatalf("sandbox: %+v", ref)
	}
	if _, ref := admit(SandboxKey, AccessLookup); ref == nil || ref.Hint != HintSandboxOnly {
		t.Fatalf("sandbox off evaluate: %+v", ref)
	}
	ts.limits.refusing, ts.limits.refuse = true, iplimit.AuthFail
	if _, ref := admit("sk_live_unit", AccessLookup); ref == nil || ref.Status != 429 || ref.Msg != MsgLockedOut || ref.RetryAfter != RetryAfterLockout {
		t.Fatalf("lockout: %+v", ref)
	}
	ts.limits.refuse = iplimit.Usage
	if _, ref := admit("sk_live_unit", AccessUsage); ref == nil || ref.RetryAfter != RetryAfterUsage || ref.Msg != MsgTooMany {
		t.Fatalf("usage limiter: %+v", ref)
	}
	ts.limits.refusing = false

	v := ts.accounts.view
	v.AllowPrefixes = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
	if _, ref := admit("sk_live_unit", AccessLookup); ref == nil || ref.Status != 403 || ref.Msg != MsgNotAllowlisted {
		t.Fatalf("allowlist: %+v", ref)
	}
	if _, ref := admit("sk_test_unit", AccessLookup); ref != nil {
		t.Fatalf("the test key is exempt from the allowlist: %+v", ref)
	}
	if _, ref := admit("sk_live_unit", AccessUsage); ref != nil {
		t.Fatalf("usage ignores the allowlist: %+v", ref)
	}
	v.AllowPrefixes, v.Suspended = nil, true
	if _, ref := admit("sk_live_unit", AccessUsage); ref != refuseSuspended {
		t.Fatalf("suspended: %+v", ref)
	}
	v.Suspended, v.Plan = false, quota.PlanPublicInterest
	if _, ref := admit("sk_live_unit", AccessLookup); ref != nil || ts.limits.taken[0].Has(iplimit.Protect) {
		t.Fatalf("public interest passes the protection limit: %+v %v", ref, ts.limits.taken)
	}
	v.Plan = "starter"

	store.ok = false
	if _, ref := admit("sk_live_unit", AccessLookup); ref != RefuseStorage || len(ts.limits.taken) != 0 {
		t.Fatalf("store down: %+v %v", ref, ts.limits.taken)
	}
	// Without a key an operation takes only its own limiters (and, under
	// /v1/, the lockout check), store or not.
	if _, ref := admit("", AccessSample); ref != nil || ts.limits.taken[0] != iplimit.Of(iplimit.AuthFail, iplimit.Sample) {
		t.Fatalf("sample: %+v %v", ref, ts.limits.taken)
	}
}

type storeHealth struct{ ok bool }

func (s *storeHealth) Available() bool { return s.ok }

// TestPartsOff: a part left out of Config turns its feature off, as its
// field says, and nothing panics.
func TestPartsOff(t *testing.T) {
	ts := newTestService(t, Config{})
	c := ts.call(accounts.KeyLive)
	ev, ref := ts.Evaluate(c, &EvalRequest{FingerprintEventID: "ev_00000000000000000000000000000000", AccountID: "user-1"})
	if ref != nil || ev.Body().DeviceStatus != "unavailable" || ev.Body().Device != nil || ev.Body().Account != nil {
		t.Fatalf("evaluate: %+v %+v", ref, ev.Body())
	}
	ev.Release()
	if _, ref := ts.Evaluate(c, &EvalRequest{Token: "nt1.abc", TokenSent: true}); ref == nil || ref.Msg != MsgInvalidToken {
		t.Fatalf("network token without a codec: %+v", ref)
	}
	page := Page{Key: "pk_live_unit"}
	if _, ref := ts.CollectNetwork(c, page, &NetworkReport{}); ref == nil || ref.Status != 500 {
		t.Fatalf("collect network: %+v", ref)
	}
	if _, ref := ts.CollectDevice(c, page, &DeviceReport{Signals: new(device.Signals)}); ref == nil || ref.Status != 503 {
		t.Fatalf("collect device: %+v", ref)
	}
	ts.accounts.view.DeviceEvidenceBeta = true
	if _, ref := ts.Challenge(c, "ev_00000000000000000000000000000000", true); ref != refuseEvidence {
		t.Fatalf("challenge: %+v", ref)
	}
}

// TestAdmitOperator: a wrong operator token counts toward the operator's own
// lockout (a missing one does not), and a locked-out caller is refused
// before its token counts, the right one included. The API keys' lockout
// does not refuse the operator.
func TestAdmitOperator(t *testing.T) {
	ts := newTestService(t, Config{})
	c := &Call{Addr: netip.MustParseAddr("198.51.100.7"), Now: fixedNow}
	if ref := ts.AdmitOperator(c, true, true); ref != nil {
		t.Fatalf("right token: %+v", ref)
	}
	if ref := ts.AdmitOperator(c, true, false); ref == nil || ref.Status != 401 || ref.Msg != MsgAdminAuth || ts.limits.fails != 1 || ts.limits.failKinds[0] != iplimit.AdminFail {
		t.Fatalf("wrong token: %+v, %d fails %v", ref, ts.limits.fails, ts.limits.failKinds)
	}
	if ref := ts.AdmitOperator(c, false, false); ref == nil || ref.Status != 401 || ts.limits.fails != 1 {
		t.Fatalf("no token: %+v, %d fails", ref, ts.limits.fails)
	}
	ts.limits.refusing, ts.limits.refuse = true, iplimit.AuthFail
	if ref := ts.AdmitOperator(c, true, true); ref != nil {
		t.Fatalf("the API keys' lockout refused the operator: %+v", ref)
	}
	ts.limits.refusing, ts.limits.refuse = true, iplimit.AdminFail
	if ref := ts.AdmitOperator(c, true, true); ref == nil || ref.Status != 429 || ref.RetryAfter != RetryAfterLockout {
		t.Fatalf("locked out: %+v", ref)
	}
}

// TestInvalidKeyHints: each hint names the likely cause. "Authorization:
// Bearer Bearer sk_…" reaches the hint as "Bearer sk_…", which also has a
// space: the doubled scheme is the cause to name.
func TestInvalidKeyHints(t *testing.T) {
	for key, want := range map[string]string{
		"Bearer sk_live_abc": HintBearerTwice,
		"bearer sk_live_abc": HintBearerTwice,
		"BEARER sk_live_abc": HintBearerTwice,
		"sk_live_a bc":       HintWhitespace,
		"pk_abc":             HintKeyPrefix,
		"sk_live_unknown":    HintUnknownKey,
	} {
		if got := invalidKeyHint(key); got != want {
			t.Errorf("%q: hint %q, want %q", key, got, want)
		}
	}
}
