package bench

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRoundOrderAlternates(t *testing.T) {
	var got []int
	for r := range 4 {
		o := roundOrder(r)
		got = append(got, o[0], o[1])
	}
	if want := []int{0, 1, 1, 0, 0, 1, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v (A B B A …)", got, want)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		in := append([]float64(nil), c.in...)
		if got := median(in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("median changed its input: %v", in)
		}
	}
}

// TestCompareAlternatesTwoServers: both sides run every round, in
// alternating order, with the same workload, and the report has each
// round's figures, the medians and the ratio.
func TestCompareAlternatesTwoServers(t *testing.T) {
	fa, fb := &fakeFraudd{}, &fakeFraudd{}
	urlA, urlB := testServer(t, fa.handle), testServer(t, fb.handle)
	var log bytes.Buffer
	rep, err := Compare(context.Background(), CompareConfig{
		Scenarios: []string{"status", "evaluate-test", "lookup"},
		A:         Side{Name: "a", URL: urlA, AdminToken: "adm", ServerPID: os.Getpid()},
		B:         Side{Name: "b", URL: urlB, AdminToken: "adm", ServerPID: os.Getpid()},
		Rounds:    3,
		Run:       RunConfig{Conns: 2, Duration: 100 * time.Millisecond, Warmup: -1},
		Log:       &log,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(rep.Rows) != 2 || rep.Rows[0].Scenario != "status" || rep.Rows[1].Scenario != "evaluate-test" {
		t.Fatalf("rows %+v", rep.Rows)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].Scenario != "lookup" {
		t.Fatalf("skipped %+v (the fake has no lookup)", rep.Skipped)
	}
	for _, r := range rep.Rows {
		if len(r.CPUA) != 3 || len(r.CPUB) != 3 || len(r.RPSA) != 3 || len(r.RPSB) != 3 {
			t.Fatalf("%s: rounds %+v", r.Scenario, r)
		}
		if r.MedCPUA <= 0 || r.MedCPUB <= 0 || r.MedRPSA <= 0 || r.RatioCPU <= 0 || r.Errors != 0 {
			t.Fatalf("%s: figures %+v", r.Scenario, r)
		}
		if r.PairedRatioCPU <= 0 {
			t.Fatalf("%s: no paired ratio", r.Scenario)
		}
		if want := r.MedCPUB / r.MedCPUA; r.RatioCPU < want-0.001 || r.RatioCPU > want+0.001 {
			t.Fatalf("%s: ratio %v, want %v", r.Scenario, r.RatioCPU, want)
		}
	}
	// The runs alternate A B, B A, A B.
	var order []string
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.HasPrefix(line, "status: round ") {
			order = append(order, line[len(line)-1:])
		}
	}
	if got := strings.Join(order, ""); got != "abbaab" {
		t.Fatalf("status runs in the order %q, want abbaab", got)
	}
	// The same set-up on both sides: an account each for evaluate-test;
	// lookup's set-up made one on A, found no endpoint and was skipped
	// before B's.
	if fa.accounts.Load() != 2 || fb.accounts.Load() != 1 {
		t.Fatalf("accounts %d and %d, want 2 and 1", fa.accounts.Load(), fb.accounts.Load())
	}
	var out bytes.Buffer
	WriteCompare(&out, rep)
	for _, want := range []string{"B/A", "paired", "status", "evaluate-test", "skipped lookup", "compare A with itself (--compare a)"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("table lacks %q:\n%s", want, out.String())
		}
	}
}

// TestPairedRatio takes each round's B over its own A: a slow stretch that
// spans a whole round cancels out, where the medians of the sides do not.
func TestPairedRatio(t *testing.T) {
	a := []float64{55, 55, 55, 79, 77} // the machine slowed down for rounds 4 and 5
	b := []float64{41, 40, 59, 59, 57}
	if got := pairedRatio(a, b); got < 0.74 || got > 0.76 {
		t.Fatalf("paired %v, want about 0.75 (the medians say %v)", got, median(b)/median(a))
	}
	if got := pairedRatio([]float64{0, 10}, []float64{5, 0}); got != 0 {
		t.Fatalf("no round with both: %v", got)
	}
}
