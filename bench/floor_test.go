package bench

import (
	"encoding/json"
	"net"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestFloorBody(t *testing.T) {
	for _, n := range []int{12, 13, 100, 482, 4096} {
		b := FloorBody(n)
		if len(b) != n {
			t.Errorf("FloorBody(%d) has %d bytes", n, len(b))
		}
		if !json.Valid(b) {
			t.Errorf("FloorBody(%d) is not JSON: %s", n, b)
		}
	}
	if string(FloorBody(3)) != "{}" {
		t.Error("a size below the smallest padded object should give {}")
	}
}

func TestFloorRoutesRoundTrip(t *testing.T) {
	rs := []FloorRoute{{"/v1/evaluate", 482}, {"/v1/lookup/", 240}}
	got, err := ParseFloorRoutes(FormatFloorRoutes(rs))
	if err != nil || len(got) != 2 || got[0] != rs[0] || got[1] != rs[1] {
		t.Fatalf("round trip: %v %v", got, err)
	}
	for _, bad := range []string{"/x", "/x=abc", "=5", "/x=-1"} {
		if _, err := ParseFloorRoutes(bad); err == nil {
			t.Errorf("ParseFloorRoutes(%q): no error", bad)
		}
	}
}

func TestFloorServerAnswersSizesByPrefix(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewFloorServer([]FloorRoute{{"/v1/", 50}, {"/v1/evaluate", 300}}, 20)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Shutdown()
	tg := testTarget(t, "http://"+ln.Addr().String(), 1)
	for path, want := range map[string]int{"/v1/evaluate": 300, "/v1/usage": 50, "/api/status": 20} {
		status, body, err := call(tg, "POST", path, nil, []byte(`{"token":"test_vpn"}`))
		if err != nil || status != 200 || len(body) != want || !json.Valid(body) {
			t.Errorf("%s: %d, %d bytes, %v; want 200 with %d bytes of JSON", path, status, len(body), err, want)
		}
	}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("/v1/evaluate")
	if err := tg.Do(req, resp, 5e9); err != nil || string(resp.Header.ContentType()) != "application/json" {
		t.Fatalf("content type %q, err %v", resp.Header.ContentType(), err)
	}
}

func TestWorkloadFloorSizes(t *testing.T) {
	w := NewWorkload("m",
		Part{Name: "a", Weight: 3, FloorPath: "/v1/evaluate", RespSize: 400},
		Part{Name: "b", Weight: 1, FloorPath: "/v1/evaluate", RespSize: 800},
		Part{Name: "c", Weight: 1, FloorPath: "/api/status", RespSize: 300},
	)
	got := w.FloorSizes()
	if len(got) != 2 || got[0] != (FloorRoute{"/v1/evaluate", 500}) || got[1] != (FloorRoute{"/api/status", 300}) {
		t.Fatalf("floor sizes %v", got)
	}
}
