package challenge

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/intel/evidence"
)

var t0 = time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)

func newClient(t *testing.T) *Client {
	t.Helper()
	c := New(actor.NewActorSystem().Root, Config{Shards: 2, Key: []byte("k")})
	t.Cleanup(func() { c.Stop() })
	return c
}

func vec(v float32) *[evidence.Features]float32 {
	var f [evidence.Features]float32
	for i := range f {
		f[i] = v
	}
	return &f
}

func TestIssueUseExpire(t *testing.T) {
	c := newClient(t)
	is, err := c.Issue(Issue{Customer: "a", Event: "ev1", Device: "d1", Now: t0})
	if err != nil || !evidence.ValidChallenge(is.Challenge) || !is.Expires.Equal(t0.Add(TTL)) {
		t.Fatalf("issue: %+v %v", is, err)
	}
	sub := Submit{Customer: "a", Event: "ev1", Device: "d1", Challenge: is.Challenge, GPU: vec(0.5), Now: t0.Add(time.Minute)}
	// Bound to event, device and customer.
	for _, bad := range []Submit{
		{Customer: "b", Event: "ev1", Device: "d1"},
		{Customer: "a", Event: "ev2", Device: "d1"},
		{Customer: "a", Event: "ev1", Device: "d2"},
	} {
		bad.Challenge, bad.GPU, bad.Now = is.Challenge, vec(0.5), sub.Now
		if r, _ := c.Submit(bad); r.Accepted || r.Status != StatusExpiredOrUsed {
			t.Fatalf("mismatched %+v accepted: %+v", bad, r)
		}
	}
	r, err := c.Submit(sub)
	if err != nil || !r.Accepted || r.Status != StatusRecorded {
		t.Fatalf("first use: %+v %v", r, err)
	}
	if r, _ := c.Submit(sub); r.Accepted || r.Status != StatusExpiredOrUsed {
		t.Fatalf("second use: %+v", r)
	}
	is2, _ := c.Issue(Issue{Customer: "a", Event: "ev3", Device: "d1", Now: t0})
	late := Submit{Customer: "a", Event: "ev3", Device: "d1", Challenge: is2.Challenge, GPU: vec(0.5), Now: t0.Add(TTL)}
	if r, _ := c.Submit(late); r.Accepted || r.Status != StatusExpiredOrUsed {
		t.Fatalf("expired use: %+v", r)
	}
	if n, _ := c.Counts("a"); n.Challenges != 0 || n.Devices != 1 {
		t.Fatalf("counts %+v", n)
	}
}

func TestOutstandingAndHourly(t *testing.T) {
	c := newClient(t)
	for i := range MaxOutstanding {
		if _, err := c.Issue(Issue{Customer: "a", Event: "e", Device: "d", Now: t0.Add(time.Duration(i) * time.Millisecond)}); err != nil {
			t.Fatal(i, err)
		}
	}
	if _, err := c.Issue(Issue{Customer: "a", Event: "e", Device: "d", Now: t0.Add(time.Second)}); !errors.Is(err, ErrOutstanding) {
		t.Fatalf("51st outstanding: %v", err)
	}
	// Another customer is not affected.
	if _, err := c.Issue(Issue{Customer: "b", Event: "e", Device: "d", Now: t0}); err != nil {
		t.Fatal(err)
	}
	// After expiry 10 more fit the hour, then 429 until the first leaves the window.
	now := t0.Add(3 * time.Minute)
	for i := range PerHour - MaxOutstanding {
		if _, err := c.Issue(Issue{Customer: "a", Event: "e", Device: "d", Now: now}); err != nil {
			t.Fatal(i, err)
		}
	}
	_, err := c.Issue(Issue{Customer: "a", Event: "e", Device: "d", Now: now})
	var rl *RateLimited
	if !errors.As(err, &rl) || rl.RetryAfter != 57*time.Minute {
		t.Fatalf("61st in the hour: %v", err)
	}
	if _, err := c.Issue(Issue{Customer: "a", Event: "e", Device: "d", Now: t0.Add(Window)}); err != nil {
		t.Fatalf("after the window: %v", err)
	}
}

func gpu(c *Client, t *testing.T, ev, dev string, v float32, now time.Time) Submitted {
	t.Helper()
	is, err := c.Issue(Issue{Customer: "a", Event: ev, Device: dev, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Submit(Submit{Customer: "a", Event: ev, Device: dev, Challenge: is.Challenge, GPU: vec(v), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSamples(t *testing.T) {
	c := newClient(t)
	if r := gpu(c, t, "e1", "d1", 0.5, t0); r.Status != StatusRecorded || r.HasNearest {
		t.Fatalf("first: %+v", r)
	}
	if r := gpu(c, t, "e1", "d1", 0.5, t0.Add(time.Minute)); r.Status != StatusNotSaved {
		t.Fatalf("same event: %+v", r)
	}
	if r := gpu(c, t, "e2", "d1", 0.5, t0.Add(10*time.Second)); r.Status != StatusNotSaved {
		t.Fatalf("cooldown: %+v", r)
	}
	if r := gpu(c, t, "e3", "d2", 0.25, t0.Add(time.Minute)); r.Status != StatusRecorded || r.Nearest != "d1" || r.RMS != 0.25 {
		t.Fatalf("nearest: %+v", r)
	}
	base := t0.Add(time.Hour) // 30 challenges an hour stays under the limit
	for i := range MaxDevices - 2 {
		gpu(c, t, fmt.Sprint("f", i), fmt.Sprint("x", i), 0.9, base.Add(time.Duration(i)*2*time.Minute))
	}
	end := base.Add(2 * MaxDevices * time.Minute)
	if r := gpu(c, t, "g1", "new", 0.9, end.Add(time.Minute)); r.Status != StatusNotSaved {
		t.Fatalf("201st device: %+v", r)
	}
	if r := gpu(c, t, "g2", "d1", 0.4, end.Add(2*time.Minute)); r.Status != StatusRecorded {
		t.Fatalf("known device at the cap: %+v", r)
	}
	// Retained 30 days after the last accepted sample.
	if n, _ := c.Counts("a"); n.Devices != MaxDevices {
		t.Fatalf("devices %d", n.Devices)
	}
	gpu(c, t, "h", "d9", 0.1, end.Add(2*time.Minute+Retention))
	if n, _ := c.Counts("a"); n.Devices != 1 {
		t.Fatalf("after retention: %+v", n)
	}
	if err := c.Purge("a"); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Counts("a"); n != (Counts{}) {
		t.Fatalf("after purge: %+v", n)
	}
}

func browserSubmit(c *Client, t *testing.T, ev, dev, account string, reading uint32, os string, now time.Time) Submitted {
	t.Helper()
	is, err := c.Issue(Issue{Customer: "a", Event: ev, Device: dev, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	b := &evidence.Browser{Page: [2]evidence.Claim{{Browser: "chromium", OS: os, Present: true}, {Browser: "chromium", OS: os, Present: true}}}
	b.Computations[0] = make([]uint32, evidence.ComputationLen)
	b.Computations[0][0] = reading
	r, err := c.Submit(Submit{Customer: "a", Event: ev, Device: dev, AccountID: account, Challenge: is.Challenge, Browser: b, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestBrowserFindings(t *testing.T) {
	c := newClient(t)
	if r := browserSubmit(c, t, "e1", "d1", "acct", 7, "windows", t0); !r.Accepted || r.Randomization || r.ProfileBurst {
		t.Fatalf("first: %+v", r)
	}
	if r := browserSubmit(c, t, "e2", "d1", "acct", 7, "windows", t0.Add(time.Minute)); r.Randomization || r.ProfileBurst {
		t.Fatalf("same reading: %+v", r)
	}
	if r := browserSubmit(c, t, "e3", "d2", "acct", 8, "windows", t0.Add(time.Hour)); !r.Randomization {
		t.Fatalf("changed reading for the account: %+v", r)
	}
	if r := browserSubmit(c, t, "e4", "d3", "", 9, "windows", t0.Add(time.Hour)); r.Randomization {
		t.Fatalf("no accountId: %+v", r)
	}
	if r := browserSubmit(c, t, "e5", "d2", "acct", 8, "windows", t0.Add(Retention+2*time.Hour)); r.Randomization {
		t.Fatalf("after 30 days: %+v", r)
	}
	// Burst: three distinct profiles from one device in the window.
	now := t0.Add(40 * 24 * time.Hour)
	browserSubmit(c, t, "b1", "burst", "", 1, "windows", now)
	browserSubmit(c, t, "b2", "burst", "", 2, "linux", now.Add(time.Minute))
	if r := browserSubmit(c, t, "b3", "burst", "", 3, "macos", now.Add(2*time.Minute)); !r.ProfileBurst {
		t.Fatalf("burst: %+v", r)
	}
	// Replay of a used challenge.
	is, _ := c.Issue(Issue{Customer: "a", Event: "r", Device: "d", Now: now})
	b := &evidence.Browser{}
	c.Submit(Submit{Customer: "a", Event: "r", Device: "d", Challenge: is.Challenge, Browser: b, Now: now})
	if r, _ := c.Submit(Submit{Customer: "a", Event: "r", Device: "d", Challenge: is.Challenge, Browser: b, Now: now}); r.Accepted || r.Status != StatusReplay {
		t.Fatalf("replay: %+v", r)
	}
}

func TestSweepDropsIdleCustomers(t *testing.T) {
	c := newClient(t)
	c.Issue(Issue{Customer: "a", Event: "e", Device: "d", Now: t0})
	c.Sweep(t0.Add(time.Minute))
	if n, _ := c.Counts("a"); n.Challenges != 1 {
		t.Fatalf("swept too early: %+v", n)
	}
	// Past the hour window nothing is left: the customer goes.
	c.Sweep(t0.Add(Window))
	if n, _ := c.Counts("a"); n != (Counts{}) {
		t.Fatalf("after sweep: %+v", n)
	}
	total := 0
	for _, st := range c.states {
		total += st.customers.Len()
	}
	if total != 0 {
		t.Fatalf("%d customers resident", total)
	}
}

// TestBurstCountsAResightedProfile: a profile seen again counts from its
// latest sighting: A at 0 and again at 9 min, then B and C at 11 min, are
// three distinct profiles from one device within BurstWindow.
func TestBurstCountsAResightedProfile(t *testing.T) {
	c := newClient(t)
	browserSubmit(c, t, "a1", "dev", "", 1, "windows", t0)
	browserSubmit(c, t, "a2", "dev", "", 1, "windows", t0.Add(9*time.Minute))
	browserSubmit(c, t, "b1", "dev", "", 2, "linux", t0.Add(11*time.Minute))
	if r := browserSubmit(c, t, "c1", "dev", "", 3, "macos", t0.Add(11*time.Minute)); !r.ProfileBurst {
		t.Fatalf("3 distinct profiles within 10 minutes (A re-seen at 9m), no burst: %+v", r)
	}
}

// TestPeekChangesNothing: a peek (the personal test key's evaluation) reads
// the challenge, the samples and the hashes but leaves the challenge unused
// and keeps nothing; before, it used the challenge and recorded like the
// live key.
func TestPeekChangesNothing(t *testing.T) {
	c := newClient(t)
	is, _ := c.Issue(Issue{Customer: "a", Event: "ev1", Device: "d1", Now: t0})
	peek := Submit{Customer: "a", Event: "ev1", Device: "d1", Challenge: is.Challenge, GPU: vec(0.5), Now: t0, Peek: true}
	for range 2 {
		if r, err := c.Submit(peek); err != nil || !r.Accepted || r.Status != StatusNotSaved {
			t.Fatalf("peek: %+v %v", r, err)
		}
	}
	if n, _ := c.Counts("a"); n.Challenges != 1 || n.Devices != 0 {
		t.Fatalf("after peeks: %+v", n)
	}
	live := peek
	live.Peek = false
	if r, _ := c.Submit(live); !r.Accepted || r.Status != StatusRecorded {
		t.Fatalf("live after peeks: %+v", r)
	}
	// Browser findings: peeked profiles and readings are not remembered.
	for i, os := range []string{"windows", "linux", "macos"} {
		ev := fmt.Sprintf("p%d", i)
		is, _ := c.Issue(Issue{Customer: "a", Event: ev, Device: "burst", Now: t0})
		b := &evidence.Browser{Page: [2]evidence.Claim{{Browser: "chromium", OS: os, Present: true}, {Browser: "chromium", OS: os, Present: true}}}
		b.Computations[0] = make([]uint32, evidence.ComputationLen)
		b.Computations[0][0] = uint32(i)
		r, _ := c.Submit(Submit{Customer: "a", Event: ev, Device: "burst", AccountID: "acct", Challenge: is.Challenge, Browser: b, Now: t0, Peek: true})
		if !r.Accepted || r.ProfileBurst || r.Randomization {
			t.Fatalf("peek %d: %+v", i, r)
		}
	}
	if n, _ := c.Counts("a"); n.Accounts != 0 || n.Challenges != 3 {
		t.Fatalf("after browser peeks: %+v", n)
	}
}
