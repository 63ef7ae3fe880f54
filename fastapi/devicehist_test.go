package fastapi

import (
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/internal/secrets"
)

func newDeviceHist(t *testing.T) *devicehist.Client {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	c, err := devicehist.New(sys.Root, devicehist.Config{Shards: 2, Secret: secrets.FromBytes([]byte("unit"))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

func TestAdminDevices(t *testing.T) {
	e := newTestEnv(t)
	// Without the actor: an empty list, still 404 for an unknown account.
	if ctx := e.do("GET", "/admin/v1/accounts/"+e.acct.View.ID+"/devices", "Bearer adm", nil); ctx.Response.StatusCode() != 200 || string(ctx.Response.Body()) != "[]" {
		t.Fatalf("no actor: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	dh := newDeviceHist(t)
	e.srv.deps.DeviceHist = dh
	for i, d := range []string{"v1", "v2", "v1"} {
		if _, err := dh.Observe(devicehist.Observation{Customer: e.acct.View.ID, EventID: "ev" + string(rune('a'+i)), DeviceID: d,
			AccountID: "user-" + string(rune('a'+i)), Now: fixedNow.Add(time.Duration(i-3) * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 60; i++ { // another customer's devices never show
		dh.Observe(devicehist.Observation{Customer: "acc_other", DeviceID: "o" + string(rune('a'+i)), Now: fixedNow})
	}
	ctx := e.do("GET", "/admin/v1/accounts/"+e.acct.View.ID+"/devices", "Bearer adm", nil)
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("devices: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	golden(t, "admin_devices", ctx.Response.Body())
	if ctx := e.do("GET", "/admin/v1/accounts/acc_nope/devices", "Bearer adm", nil); ctx.Response.StatusCode() != 404 {
		t.Fatalf("unknown account: %d", ctx.Response.StatusCode())
	}
	if ctx := e.do("GET", "/admin/v1/accounts/"+e.acct.View.ID+"/devices", "Bearer wrong", nil); ctx.Response.StatusCode() != 401 {
		t.Fatalf("wrong admin token: %d", ctx.Response.StatusCode())
	}
}
