package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/storage"
	"github.com/fraudd/fraudd/storage/storagetest"
)

// hungStore is a quota store whose writes hang until release closes: a disk
// that stopped answering, so that a quota shard stays in its handler.
type hungStore struct {
	entered chan struct{}
	release chan struct{}
}

func (s hungStore) LoadUsage(string, storage.Month) (storage.MonthCounts, storage.Totals, error) {
	s.entered <- struct{}{}
	<-s.release
	return storage.MonthCounts{}, storage.Totals{}, nil
}

func (s hungStore) ApplyUsage([]storage.UsageDelta) error { return nil }

// syncBuffer is a log destination safe for the actors' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestActorStopsKeepThePlan: the actor services stopped one after the other
// once the node-to-node service stopped each keep to the plan's end between
// them, not actors.StopTimeout apiece, when a shard of each is stuck; what
// was cut short is logged, and collected for the stop's exit code (a shard
// stuck at the deadline did not write its last commits). The plan is read
// when the deferred stops run, not when they were deferred.
func TestActorStopsKeepThePlan(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	release := make(chan struct{})
	defer close(release)
	var plan shutdownPlan // set later, as serve sets it on the signal
	var failed []error
	now := time.Now()
	stops := func() {
		for i := range 3 {
			st := hungStore{entered: make(chan struct{}, 1), release: release}
			q := quota.New(sys.Root, quota.Config{Shards: 1, Store: st, Timeout: 20 * time.Second})
			go q.Charge(quota.Charge{Account: "acct", Kind: quota.Evaluate, Monthly: true, Now: now,
				Limits: quota.LimitsFor(quota.PlanCustom, nil, nil, now, now)})
			<-st.entered
			defer stopActors(log, "quota actors "+string(rune('a'+i)), q, &plan.end, &failed)
		}
		plan = shutdownPlan{end: time.Now().Add(300 * time.Millisecond)}
	}
	start := time.Now()
	stops()
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("three stuck services stopped by a plan ending in 300ms took %v", took)
	}
	if got := strings.Count(logs.String(), "shards did not stop in time"); got != 3 {
		t.Errorf("%d cut-short stops logged, want 3:\n%s", got, logs.String())
	}
	if len(failed) != 3 || !strings.Contains(failed[0].Error(), "stop quota actors") {
		t.Errorf("failed stops collected for the exit code: %v, want 3", failed)
	}
}

// TestStopFailsWhenTheStoreCloseFails: a stop whose store cannot be closed
// (its last writes fail, as on a full or failing disk) exits 1 with one
// ERROR line naming the close, where it exited 0 and a supervisor took the
// stop for a clean one. The store runs on storagetest.FailingWrites, so the
// test drives serve itself rather than the binary.
func TestStopFailsWhenTheStoreCloseFails(t *testing.T) {
	cfg, err := parseServe([]string{"--addr", "127.0.0.1:0", "--data-dir", t.TempDir(),
		"--admin-token", "adm_stop_test_token_0123456789", "--secret", "stop-test-secret"}, envVars{})
	if err != nil {
		t.Fatal(err)
	}
	fs, failing := storagetest.FailingWrites()
	cfg.storeFS = fs
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, signal := context.WithCancel(context.Background())
	defer signal()
	code := make(chan int, 1)
	go func() { code <- exitCode(log, serve(ctx, nil, cfg, log)) }()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(logs.String(), `msg="fraudd listening"`); {
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start in 60s:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	failing.Store(true)
	signal()
	select {
	case c := <-code:
		if c != 1 {
			t.Errorf("exit %d after a failed store close, want 1:\n%s", c, logs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not stop in 60s:\n%s", logs.String())
	}
	var errs []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=ERROR") {
			errs = append(errs, line)
		}
	}
	if len(errs) != 1 || !strings.Contains(errs[0], `msg="fraudd stopped with an error"`) || !strings.Contains(errs[0], "close storage") {
		t.Errorf("ERROR lines %q, want one naming the store's close:\n%s", errs, logs.String())
	}
	if strings.Contains(logs.String(), `msg="storage closed"`) {
		t.Errorf("a failed close logged as done:\n%s", logs.String())
	}
}

// TestStopSignals: the first signal begins the stop, the second hurries it
// with one WARN line, and a third is ignored (logged), so that nothing can
// skip the actors' last commits and the store's close. SIGUSR1 stands in
// for SIGTERM, to the test process itself.
func TestStopSignals(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, hurry, release := stopSignals(log, syscall.SIGUSR1)
	defer release()
	send := func() {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !done(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s:\n%s", what, logs.String())
			}
		}
	}
	send()
	waitFor("the stop on the first signal", func() bool { return ctx.Err() != nil })
	if closed(hurry) {
		t.Fatal("the first signal hurried the stop")
	}
	send()
	waitFor("the hurry on the second signal", func() bool { return closed(hurry) })
	send()
	waitFor("the third signal ignored", func() bool { return strings.Contains(logs.String(), "signal ignored") })
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("%d WARN lines, want the one of the hurry:\n%s", n, logs.String())
	}
}
