package checks

import (
	"testing"
	"time"
)

// TestChainChargeBegunOnce: a caller that stops waiting before its charge
// began makes sure it never begins (its 503 says nothing was charged); a
// caller whose charge is under way waits for it instead of answering 503
// over a call that may count.
func TestChainChargeBegunOnce(t *testing.T) {
	gaveUp := &chain{done: make(chan struct{}, 1)}
	gaveUp.stage.Store(stageCharge)
	if gaveUp.chargeBegun() {
		t.Fatal("the caller waited for a charge that had not begun")
	}
	if gaveUp.Begin() {
		t.Fatal("a charge began after its caller gave up on it")
	}

	underWay := &chain{done: make(chan struct{}, 1)}
	underWay.stage.Store(stageCharge)
	if !underWay.Begin() {
		t.Fatal("a charge could not begin while its caller waited")
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		underWay.finish()
	}()
	if !underWay.chargeBegun() {
		t.Fatal("the caller did not wait for the charge under way")
	}

	// Past the charge (the facts under way), the caller answers without
	// them as before.
	facts := &chain{done: make(chan struct{}, 1)}
	facts.stage.Store(stageResolve)
	if facts.chargeBegun() {
		t.Fatal("the caller waited again for the facts")
	}
}
