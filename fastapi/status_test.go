package fastapi

import (
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/actors/health"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/storage"
)

// panicStore makes every quota shard handler that loads an account panic: an
// injected bug.
type panicStore struct{}

func (panicStore) LoadUsage(string, storage.Month) (storage.MonthCounts, storage.Totals, error) {
	panic("injected panic")
}

func (panicStore) ApplyUsage([]storage.UsageDelta) error { return nil }

// TestStatusReportsCrashedShard: while a shard its supervisor stopped is
// down, /api/status says the API is degraded (same shape); its requests get
// 503 at once; once the shard is restarted, status is operational again.
func TestStatusReportsCrashedShard(t *testing.T) {
	e := newTestEnv(t)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	sup := actors.SupervisionOf(sys)
	sup.SetRestartDelays(3*time.Second, 3*time.Second)
	q := quota.New(sys.Root, quota.Config{Shards: 1, Store: panicStore{}, Timeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	mon, err := health.New(sys.Root, health.Config{Clock: clock.Fixed{T: fixedNow}, Checks: health.Checks{Actors: sup.Down}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Stop(); mon.Stop() })
	e.srv.deps.Quota, e.srv.deps.Health = q, mon
	e.srv.checks = pipeline(&e.srv.deps, e.srv.log)
	sec := 0
	status := func() map[string]any {
		t.Helper()
		sec++ // the answer is cached per second of the clock
		e.srv.deps.Clock = clock.Fixed{T: fixedNow.Add(time.Duration(sec) * time.Second)}
		ctx := e.do("GET", "/api/status", "", nil)
		if ctx.Response.StatusCode() != 200 {
			t.Fatalf("status: %d", ctx.Response.StatusCode())
		}
		var m map[string]any
		if err := json.Unmarshal(ctx.Response.Body(), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	api := func(m map[string]any) any { return m["services"].(map[string]any)["api"].(map[string]any)["status"] }
	if m := status(); m["status"] != "operational" || api(m) != "operational" {
		t.Fatalf("before: %v %v", m["status"], m["services"])
	}
	// Every usage read panics in the quota shard; the 11th panic within 10 s
	// makes protoactor's supervisor stop it.
	var wg sync.WaitGroup
	for i := 0; i < 11; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ctx := e.do("GET", "/v1/usage", "Bearer "+e.acct.LiveKey, nil); ctx.Response.StatusCode() != 503 {
				t.Errorf("usage %d: %d %s", i, ctx.Response.StatusCode(), ctx.Response.Body())
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for len(sup.Down()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	m := status()
	if m["status"] != "degraded" || api(m) != "degraded" {
		t.Fatalf("while the quota shard is down: %v %v", m["status"], m["services"])
	}
	for _, k := range []string{"status", "uptime", "services", "last_probe", "version"} {
		if _, ok := m[k]; !ok {
			t.Errorf("status lost %q", k)
		}
	}
	start := time.Now()
	ctx := e.do("GET", "/v1/usage", "Bearer "+e.acct.LiveKey, nil)
	// At once: not after the one-second timeout of a call nobody answers.
	if ctx.Response.StatusCode() != 503 || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("usage while down: %d after %s", ctx.Response.StatusCode(), time.Since(start))
	}
	for len(sup.Down()) > 0 && time.Now().Before(deadline.Add(10*time.Second)) {
		time.Sleep(5 * time.Millisecond)
	}
	if m := status(); m["status"] != "operational" || api(m) != "operational" {
		t.Fatalf("after the restart: %v %v", m["status"], m["services"])
	}
}
