package checks

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fraudd/fraudd/actors/devicehist"
)

// lateHistory holds the first observe; the test's log handler lets it
// answer just after the caller timed out, before the caller releases the
// chain. Later observes answer at once.
type lateHistory struct {
	held    atomic.Bool
	release chan struct{}
	done    chan struct{}
	gate    chan struct{} // later observes answer once it is closed
}

func (h *lateHistory) Observe(devicehist.Observation) (devicehist.Facts, error) {
	return devicehist.Facts{}, nil
}
func (h *lateHistory) Prepare(devicehist.Observation, *devicehist.Prepared) error { return nil }
func (h *lateHistory) ObserveThen(st devicehist.ObserveStep) {
	if h.held.CompareAndSwap(false, true) {
		go func() { <-h.release; st.Observed(devicehist.Facts{}, nil); close(h.done) }()
		return
	}
	gate := h.gate
	go func() {
		if gate != nil {
			<-gate
		}
		st.Observed(devicehist.Facts{}, nil)
	}()
}

// onTimeoutLog runs fn when the timed-out evaluation logs it gave up.
type onTimeoutLog struct {
	slog.Handler
	fn func()
}

func (h onTimeoutLog) Enabled(context.Context, slog.Level) bool { return true }
func (h onTimeoutLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "device event and history not read in time" {
		h.fn()
	}
	return nil
}

// TestLateChainNotPooled: a chain that answers after its caller's wait ran
// out but before the caller released it does not go back to the pool with
// its answer still in done: the next evaluation would take that stale
// answer for its own, and read its results while its actors wrote them.
func TestLateChainNotPooled(t *testing.T) {
	evs := shortChainWithEvents(t)
	hist := &lateHistory{release: make(chan struct{}), done: make(chan struct{})}
	var once atomic.Bool
	log := slog.New(onTimeoutLog{Handler: slog.DiscardHandler, fn: func() {
		if once.CompareAndSwap(false, true) {
			close(hist.release)
			<-hist.done // the chain answered: stage done, its token in done
		}
	}})
	ts := newTestService(t, Config{Events: evs, History: hist, Logger: log})
	ev, ref := ts.Evaluate(ts.call(1), &EvalRequest{FingerprintEventID: collectEvent(t, evs, ts, "v-1"), AccountID: "user-1"})
	if ref != nil {
		t.Fatalf("first: refused %+v", ref)
	}
	ev.Release()
	if c := chains.Get().(*chain); true {
		t.Logf("timed-out log seen %v; pooled chain: %d answers waiting in done", once.Load(), len(c.done))
		if len(c.done) > 0 {
			t.Errorf("a chain went back to the pool with %d stale answer(s) in done", len(c.done))
		}
		chains.Put(c)
	}
	// The next evaluation's history answers only after Evaluate returned:
	// Evaluate must wait for it (up to chainTimeout), not return at once on
	// the stale answer.
	hist.gate = make(chan struct{})
	next := collectEvent(t, evs, ts, "v-next")
	start := time.Now()
	ev, ref = ts.Evaluate(ts.call(1), &EvalRequest{FingerprintEventID: next, AccountID: "user-2"})
	took := time.Since(start)
	close(hist.gate)
	if ref == nil {
		ev.Release()
	}
	if took < chainTimeout/2 {
		t.Fatalf("the next evaluation returned after %v while its own history had not answered: it took the late chain's stale answer for its own", took)
	}
}
