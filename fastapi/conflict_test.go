package fastapi

import (
	"fmt"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
)

// racingShared is a shared configuration where another node always wrote
// first: every change is refused by its revision check.
type racingShared struct{}

func (racingShared) Create(*storage.Account) error { return accounts.ErrExists }

func (racingShared) Modify(id string, _ func(*accounts.Records) error) error {
	return fmt.Errorf("account %s: %w", id, accounts.ErrConflict)
}

// TestAdminWriteThatLostARaceAnswers409: cluster mode's refused revision
// check is a 409 in the error shape, and the account is left as it was.
func TestAdminWriteThatLostARaceAnswers409(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	clk := clock.Fixed{T: fixedNow}
	accts, err := accounts.Start(sys.Root, accounts.Config{DB: db, Master: secrets.FromBytes([]byte("unit")), Clock: clk, Shared: racingShared{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { accts.Stop(); sys.Shutdown(); db.Close() })
	a := &storage.Account{ID: "acc_race", Email: "race@example.com", Plan: "free", CreatedAt: fixedNow}
	if err := accts.Install([]accounts.Records{{Account: a}}, nil); err != nil {
		t.Fatal(err)
	}
	limits := iplimit.New(sys.Root, iplimit.Config{Shards: 2})
	q := quota.New(sys.Root, quota.Config{Shards: 2})
	t.Cleanup(func() { limits.Stop(); q.Stop() })
	e := &testEnv{srv: New(Config{AdminToken: "adm", Version: "test", StartedAt: fixedNow},
		Deps{Accounts: accts, Store: &fakeStore{}, Clock: clk, Limits: limits, Quota: q, Feeds: testFeeds(t)})}
	for _, c := range []struct{ method, uri, body string }{
		{"PATCH", "/admin/v1/accounts/acc_race", `{"plan":"growth"}`},
		{"POST", "/admin/v1/accounts/acc_race/keys/test/rotate", ""},
		{"PUT", "/admin/v1/accounts/acc_race/rules", `[{"signal":"vpn","action":"block"}]`},
	} {
		ctx := e.do(c.method, c.uri, "Bearer adm", []byte(c.body))
		if ctx.Response.StatusCode() != 409 {
			t.Fatalf("%s %s: %d %s", c.method, c.uri, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		golden(t, "error_account_conflict", ctx.Response.Body())
	}
	if v := accts.Get("acc_race"); v.Plan != "free" || len(v.Rules) != 0 {
		t.Fatalf("refused writes changed the account: %+v", v)
	}
}
