package checks

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/actors/traffic"
	"github.com/fraudd/fraudd/actors/webhook"
	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/storage"
)

// fixedNow is the clock of every test here.
var fixedNow = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// The fakes of the pipeline's required parts. Each records what it was
// asked, so a test can check which hops a flow made.

// fakeAccounts knows one account under its live, test and publishable keys.
type fakeAccounts struct {
	view *accounts.View
	keys map[string]accounts.KeyKind
}

func newFakeAccounts() *fakeAccounts {
	v := &accounts.View{Account: storage.Account{ID: "acc_unit", Plan: "starter", CreatedAt: fixedNow.AddDate(0, -1, 0),
		PublishableKey: "pk_live_unit"}}
	return &fakeAccounts{view: v, keys: map[string]accounts.KeyKind{"sk_live_unit": accounts.KeyLive, "sk_test_unit": accounts.KeyTest}}
}

func (f *fakeAccounts) Authenticate(key string, _ time.Time) (accounts.Auth, bool) {
	k, ok := f.keys[key]
	if !ok {
		return accounts.Auth{}, false
	}
	return accounts.Auth{View: f.view, Kind: k}, true
}

func (f *fakeAccounts) ResolveToken(string, bool, uint32, time.Time) (accounts.Auth, bool) {
	return accounts.Auth{}, false
}

func (f *fakeAccounts) ByPublishableKey(pk string) *accounts.View {
	if pk == f.view.PublishableKey {
		return f.view
	}
	return nil
}

// fakeLimiter allows everything unless refusing, then it refuses every
// take that includes the limiter refuse.
type fakeLimiter struct {
	mu        sync.Mutex
	refusing  bool
	refuse    iplimit.Kind
	taken     []iplimit.Kinds
	fails     int
	failKinds []iplimit.Kind
}

func (f *fakeLimiter) Take(kinds iplimit.Kinds, _ netip.Addr, _ time.Time) (iplimit.Verdict, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.taken = append(f.taken, kinds)
	if f.refusing && kinds.Has(f.refuse) {
		return iplimit.Verdict{Kind: f.refuse, RetryAfter: 7}, nil
	}
	return iplimit.Verdict{Allowed: true}, nil
}

func (f *fakeLimiter) Fail(k iplimit.Kind, _ netip.Addr, _ time.Time) {
	f.mu.Lock()
	f.failKinds = append(f.failKinds, k)
	f.fails++
	f.mu.Unlock()
}

// fakeQuota records every charge and answers result.
type fakeQuota struct {
	mu      sync.Mutex
	result  quota.ChargeResult
	err     error
	charges []quota.Charge
	totals  int
}

func (f *fakeQuota) Charge(c quota.Charge) (quota.ChargeResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.charges = append(f.charges, c)
	if f.err != nil {
		return quota.ChargeResult{}, f.err
	}
	r := f.result
	if r.Refusal == quota.NotRefused {
		r.Allowed = true
	}
	return r, nil
}

func (f *fakeQuota) Usage(quota.Usage) (quota.UsageView, error) { return quota.UsageView{}, f.err }

func (f *fakeQuota) Collect(quota.Collect) (quota.CollectResult, error) {
	return quota.CollectResult{Allowed: f.err == nil}, f.err
}

func (f *fakeQuota) CountTotal(string, time.Time) {
	f.mu.Lock()
	f.totals++
	f.mu.Unlock()
}

var (
	feedsOnce sync.Once
	feedsSnap *netlists.Snapshot
	feedsErr  error
)

// testFeeds loads the embedded feeds once for the whole package.
func testFeeds(t testing.TB) *netlists.Store {
	t.Helper()
	feedsOnce.Do(func() { feedsSnap, feedsErr = netlists.LoadEmbedded() })
	if feedsErr != nil {
		t.Fatal(feedsErr)
	}
	return netlists.NewStore(feedsSnap)
}

// testService is a pipeline over fakes; cfg's optional parts are kept.
type testService struct {
	*Service
	accounts *fakeAccounts
	limits   *fakeLimiter
	quota    *fakeQuota
}

func newTestService(t testing.TB, cfg Config) *testService {
	t.Helper()
	ts := &testService{accounts: newFakeAccounts(), limits: &fakeLimiter{}, quota: &fakeQuota{}}
	cfg.Accounts, cfg.Limits, cfg.Quota, cfg.Feeds = ts.accounts, ts.limits, ts.quota, testFeeds(t)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts.Service = s
	return ts
}

// call is an admitted call of the fake account's key kind.
func (ts *testService) call(kind accounts.KeyKind) *Call {
	return &Call{Addr: netip.MustParseAddr("73.0.0.1"), Now: fixedNow, Auth: accounts.Auth{View: ts.accounts.view, Kind: kind}}
}

// recorder counts the calls of the record stage and of the resolve stage's
// optional parts.
type recorder struct {
	mu       sync.Mutex
	traffic  int
	webhooks int
	observed int
}

func (r *recorder) Record(traffic.Record) { r.mu.Lock(); r.traffic++; r.mu.Unlock() }
func (r *recorder) Notify(*webhook.Event) { r.mu.Lock(); r.webhooks++; r.mu.Unlock() }
func (r *recorder) Observe(devicehist.Observation) (devicehist.Facts, error) {
	r.mu.Lock()
	r.observed++
	r.mu.Unlock()
	return devicehist.Facts{}, nil
}
