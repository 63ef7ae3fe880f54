package fastapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/actors/webhook"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
	"github.com/fraudd/fraudd/storage/storagetest"
)

// TestWebhookTestWhileStoreDownAnswers503: POST …/webhook/test answers 202
// only for a test event that is stored as pending (what makes the delivery
// survive a restart and its attempts listed); while the store is
// unavailable it answers 503 storage_unavailable like every other admin
// write, and sends nothing. Once the store is back the same call is 202 and
// the event is delivered.
func TestWebhookTestWhileStoreDownAnswers503(t *testing.T) {
	fs, failing := storagetest.FailingWrites()
	db, err := storage.Open("d", storage.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	clk := clock.Fixed{T: fixedNow}
	accts, err := accounts.Start(sys.Root, accounts.Config{DB: db, Master: secrets.FromBytes([]byte("unit")), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int32
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	t.Cleanup(rcv.Close)
	hooks, err := webhook.New(sys.Root, webhook.Config{Accounts: accts, DB: db, Clock: clk, AllowPrivate: true, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hooks.Stop(); accts.Stop(); sys.Shutdown(); db.Close() })
	c, err := accts.Create(accounts.NewAccount{Email: "unit@example.com", Plan: "starter"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := accts.SetWebhookURL(c.View.ID, rcv.URL); err != nil {
		t.Fatal(err)
	}
	limits := iplimit.New(sys.Root, iplimit.Config{Shards: 2})
	q := quota.New(sys.Root, quota.Config{Shards: 2})
	t.Cleanup(func() { limits.Stop(); q.Stop() })
	e := &testEnv{srv: New(Config{AdminToken: "adm", Version: "test", StartedAt: fixedNow},
		Deps{Accounts: accts, Store: db, Clock: clk, Limits: limits, Quota: q, Feeds: testFeeds(t), Webhooks: hooks})}
	uri := "/admin/v1/accounts/" + c.View.ID + "/webhook/test"

	// A failed write stops the store's instance: it stays unavailable
	// (reads too) until the health probe reopens it.
	failing.Store(true)
	if err := db.Probe(); err == nil {
		t.Fatal("a synced write on a failing disk succeeded")
	}
	failing.Store(false)
	ctx := e.do("POST", uri, "Bearer adm", nil)
	if ctx.Response.StatusCode() != 503 {
		t.Fatalf("webhook test while the store is down: %d %s, want 503", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	var out map[string]any
	if err := json.Unmarshal(ctx.Response.Body(), &out); err != nil || out["code"] != "storage_unavailable" {
		t.Fatalf("webhook test while the store is down: body %s", ctx.Response.Body())
	}
	golden(t, "error_storage_unavailable", ctx.Response.Body())
	time.Sleep(100 * time.Millisecond)
	if n := hits.Load(); n != 0 {
		t.Fatalf("a test event refused with 503 was delivered %d times", n)
	}

	if err := db.Probe(); err != nil {
		t.Fatal(err)
	}
	ctx = e.do("POST", uri, "Bearer adm", nil)
	if ctx.Response.StatusCode() != 202 {
		t.Fatalf("webhook test once the store is back: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	for deadline := time.Now().Add(30 * time.Second); hits.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("test event not delivered once the store was back")
		}
	}
}
