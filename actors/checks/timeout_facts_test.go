package checks

import (
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/intel/device"
)

// heldHistory holds each chained observe until release is closed, as a
// history shard stalled on its store would.
type heldHistory struct{ release chan struct{} }

func (h *heldHistory) Observe(devicehist.Observation) (devicehist.Facts, error) {
	return devicehist.Facts{}, nil
}
func (h *heldHistory) Prepare(devicehist.Observation, *devicehist.Prepared) error { return nil }
func (h *heldHistory) ObserveThen(st devicehist.ObserveStep) {
	go func() { <-h.release; st.Observed(devicehist.Facts{}, nil) }()
}

// TestHistoryTimeoutShowsResolvedDevice: an evaluation whose wait ran out
// in the history stage had its event resolved, and used. The answer shows
// that device (device_status ok), so that the retry's device_replayed is
// about a device an answer showed.
func TestHistoryTimeoutShowsResolvedDevice(t *testing.T) {
	evs := shortChainWithEvents(t)
	hist := &heldHistory{release: make(chan struct{})}
	defer close(hist.release)
	ts := newTestService(t, Config{Events: evs, History: hist, Logger: slog.New(slog.DiscardHandler)})
	req := &EvalRequest{FingerprintEventID: collectEvent(t, evs, ts, "v-slow"), AccountID: "user-1"}
	ev, ref := ts.Evaluate(ts.call(1), req)
	if ref != nil {
		t.Fatalf("refused %+v", ref)
	}
	defer ev.Release()
	b := ev.Body()
	if b.DeviceStatus != "ok" || b.Device == nil || b.Device.VisitorID != "v-slow" {
		t.Fatalf("device_status %q, device %+v: the resolved (and used) event is not shown", b.DeviceStatus, b.Device)
	}
}

// shortChainWithEvents shortens the chain's wait for the test and starts an
// events actor for it.
func shortChainWithEvents(t *testing.T) *events.Client {
	t.Helper()
	d := chainTimeout
	chainTimeout = 200 * time.Millisecond
	t.Cleanup(func() { chainTimeout = d })
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	evs := events.New(sys.Root, events.Config{Shards: 2})
	t.Cleanup(func() { _ = evs.Stop() })
	return evs
}

// collectEvent records a device event of visitor for the test account and
// returns its fingerprintEventId.
func collectEvent(t *testing.T, evs *events.Client, ts *testService, visitor string) string {
	t.Helper()
	id, err := evs.Collect(events.Collected{Account: ts.accounts.view.ID, Now: fixedNow, Verdict: &device.Verdict{VisitorID: visitor, Complete: true}})
	if err != nil {
		t.Fatal(err)
	}
	return events.FormatEventID(id)
}
