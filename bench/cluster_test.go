package bench

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestTargetsTakeServersInTurn: a pooled Target sends each request to the
// next server, counts what each answered (5xx as failed), and stops sending
// to a dropped server, whose failures then no longer move LastFailure.
func TestTargetsTakeServersInTurn(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer ok.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }))
	defer bad.Close()
	tg, err := NewTargets([]string{ok.URL, bad.URL}, TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.CloseIdle()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.SetRequestURI("/")
	for range 10 {
		if err := tg.Do(req, resp, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if a, f := tg.Served(0); a != 5 || f != 0 {
		t.Fatalf("first server: %d answered, %d failed", a, f)
	}
	if a, f := tg.Served(1); a != 0 || f != 5 {
		t.Fatalf("second server: %d answered, %d failed", a, f)
	}
	last := tg.LastFailure()
	if last.IsZero() {
		t.Fatal("no failure recorded")
	}
	tg.Drop(1)
	for range 4 {
		if err := tg.Do(req, resp, time.Second); err != nil || resp.StatusCode() != 200 {
			t.Fatalf("after the drop: %v %d", err, resp.StatusCode())
		}
	}
	if a, _ := tg.Served(0); a != 9 {
		t.Fatalf("after the drop the first server answered %d in all; want 9", a)
	}
	if !tg.LastFailure().Equal(last) {
		t.Fatal("LastFailure moved with no failure")
	}
}

// TestWriteClusterTable: a cluster row prints its nodes and its failover.
func TestWriteClusterTable(t *testing.T) {
	cpu := 120.5
	r := Row{Scenario: "evaluate-live", Mode: Closed, Cluster: &ClusterRow{
		OwnerCallsPerRequest: 0.1068, LeaseCallsPerRequest: 0.0081, LeasedShare: 0.753, LeasedRestsPerRequest: 0.0512, PipeCallsPerFrame: 2.37,
		Nodes: []NodeRow{{Node: "node1", PID: 10, Requests: 6803, Failed: 36, ServerCPU: &cpu, OwnerCalls: 842, LeaseCalls: 57, Leased: 5860, LeasedRests: 348, PipeCalls: 4093, PipeFrames: 1727},
			{Node: "node3", PID: 12, Requests: 5618, Failed: 5, Killed: true}},
		Failover: &Failover{Node: "node3", KilledAtS: 3, LeaseTTLS: 3, WindowS: 2.37, Failed: 61, LostInFlight: 5},
	}}
	var b bytes.Buffer
	writeCluster(&b, &r)
	for _, want := range []string{"0.1068 owner round trips", "75.3% charged from lent slices", "5.1% completed at the owner after a leased charge", "2.37 calls per pipe frame", "348", "4093", "1727", "node3 (killed)", "120.5",
		"failover: node3 killed 3.0s into the window (lease TTL 3s): the others failed 61 requests over 2.370s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
}

// TestScrapeOwnerCounts: a node's cluster counters are read from its
// /metrics, with the admin token, whatever else the page holds.
func TestScrapeOwnerCounts(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" || r.Header.Get("Authorization") != "Bearer adm" {
			w.WriteHeader(401)
			return
		}
		w.Write([]byte(`# HELP fraudd_cluster_pipe_calls_total Calls.
# TYPE fraudd_cluster_pipe_calls_total counter
fraudd_cluster_owner_calls_total{kind="call"} 842
fraudd_cluster_owner_calls_total{kind="lease"} 57
fraudd_cluster_leased_charges_total 5860
fraudd_cluster_leased_rests_total 348
fraudd_cluster_pipe_calls_total 4093
fraudd_cluster_pipe_frames_total 1727
fraudd_http_requests_total{route="/v1/evaluate"} 9
`))
	}))
	defer srv.Close()
	s := &suite{cfg: Config{AdminToken: "adm"}}
	c, err := s.scrapeOwnerCounts(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ownerCounts{calls: 842, leaseCalls: 57, leased: 5860, rests: 348, pipeCalls: 4093, pipeFrames: 1727}); c != want {
		t.Fatalf("read %+v, want %+v", c, want)
	}
}
