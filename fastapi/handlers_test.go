package fastapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/valyala/fasthttp"
)

// testRequest is the one request builder of the handler tests: every helper
// (do, post, call) and every datadriven case goes through it.
type testRequest struct {
	method, uri string
	header      [][2]string // in order; a User-Agent is added unless given
	body        []byte      // nil: none
	remote      string      // the peer's address and port; "" = none (0.0.0.0)
}

// serve runs one request through the server's handler without a network.
func (e *testEnv) serve(tr testRequest) *fasthttp.RequestCtx {
	ctx := new(fasthttp.RequestCtx)
	ctx.Request.Header.SetMethod(tr.method)
	ctx.Request.SetRequestURI(tr.uri)
	agent := false
	for i, h := range tr.header {
		agent = agent || strings.EqualFold(h[0], "User-Agent")
		if strings.EqualFold(h[0], "Content-Type") {
			ctx.Request.Header.SetContentType(h[1])
			continue
		}
		// A header named again is sent again, as on the wire.
		if slices.ContainsFunc(tr.header[:i], func(p [2]string) bool { return strings.EqualFold(p[0], h[0]) }) {
			ctx.Request.Header.Add(h[0], h[1])
			continue
		}
		ctx.Request.Header.Set(h[0], h[1])
	}
	if !agent {
		ctx.Request.Header.Set("User-Agent", "unit-test/1")
	}
	if tr.body != nil {
		ctx.Request.SetBody(tr.body)
	}
	if tr.remote != "" {
		ctx.SetRemoteAddr(net.TCPAddrFromAddrPort(netip.MustParseAddrPort(tr.remote)))
	}
	e.srv.Handle(ctx)
	return ctx
}

// TestHandlers runs the request/answer scripts of testdata/handlers: each
// file is one server (fresh store and actors), its requests run in order.
// Rewrite the expected answers with `go test ./fastapi -run TestHandlers
// -rewrite`.
//
//	request [remote=ip:port] [save=field] [golden=name] [brief]
//	METHOD /path
//	Header: value          (any number)
//	body                   (the rest, optional)
//	----
//	status, then the headers that carry meaning, then the body (JSON
//	indented, timings zeroed)
//
// {live}, {test}, {pk}, {id} and {admin} stand for the account's keys, id
// and the operator token; save=field keeps the answer's JSON field for
// later requests as {field} (and shows it as <field> in this answer). A
// golden=name case must also answer exactly testdata/golden/name.json,
// which the golden tests pin: the two never drift apart. brief shows the
// status alone (setup calls whose answers carry fresh keys).
//
//	store down|up          the account store's health
func TestHandlers(t *testing.T) {
	datadriven.Walk(t, "testdata/handlers", func(t *testing.T, path string) {
		e := newCollectEnv(t)
		vars := map[string]string{
			"live": e.acct.LiveKey, "test": e.acct.TestKey, "pk": e.acct.PublishableKey,
			"id": e.acct.View.ID, "admin": "adm", "sandbox": SandboxKey,
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "store":
				e.store.down = d.CmdArgs[0].Key == "down"
				return "ok"
			case "request":
				return e.runScripted(t, d, vars)
			}
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		})
	})
}

var (
	headerLine = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9-]*): (.*)$`)
	varRef     = regexp.MustCompile(`\{([a-z_]+)\}`)
)

// shownHeaders are the response headers a handler answer is judged by.
var shownHeaders = []string{"Allow", "Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
	"Access-Control-Allow-Origin", "Cache-Control"}

func (e *testEnv) runScripted(t *testing.T, d *datadriven.TestData, vars map[string]string) string {
	t.Helper()
	in := varRef.ReplaceAllStringFunc(d.Input, func(m string) string {
		if v, ok := vars[m[1:len(m)-1]]; ok {
			return v
		}
		return m
	})
	lines := strings.Split(in, "\n")
	method, uri, ok := strings.Cut(lines[0], " ")
	if !ok {
		t.Fatalf("%s: first line is METHOD /path, got %q", d.Pos, lines[0])
	}
	tr := testRequest{method: method, uri: uri}
	rest := lines[1:]
	for len(rest) > 0 {
		m := headerLine.FindStringSubmatch(rest[0])
		if m == nil {
			break
		}
		tr.header = append(tr.header, [2]string{m[1], m[2]})
		rest = rest[1:]
	}
	if len(rest) > 0 {
		tr.body = []byte(strings.Join(rest, "\n"))
	}
	var save, goldenName string
	brief := false
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "brief":
			brief = true
		case "remote":
			tr.remote = a.Vals[0]
		case "save":
			save = a.Vals[0]
		case "golden":
			goldenName = a.Vals[0]
		default:
			t.Fatalf("%s: unknown argument %q", d.Pos, a.Key)
		}
	}
	ctx := e.serve(tr)
	body := normalise(ctx.Response.Body())
	if goldenName != "" {
		golden(t, goldenName, body)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%d\n", ctx.Response.StatusCode())
	if brief {
		return out.String()
	}
	for _, h := range shownHeaders {
		if v := ctx.Response.Header.Peek(h); len(v) > 0 {
			fmt.Fprintf(&out, "%s: %s\n", h, v)
		}
	}
	var v any
	if json.Unmarshal(body, &v) != nil {
		out.Write(body)
		return out.String()
	}
	if save != "" {
		m, _ := v.(map[string]any)
		s, ok := m[save].(string)
		if !ok {
			t.Fatalf("%s: no string %q to save in %s", d.Pos, save, body)
		}
		vars[save] = s
		m[save] = "<" + save + ">"
	}
	var pretty bytes.Buffer
	enc := json.NewEncoder(&pretty)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	out.Write(pretty.Bytes())
	return out.String()
}

// goldenWithoutScript are golden files whose answer no request script can
// build, and why.
var goldenWithoutScript = map[string]string{
	// Its devices are observed at chosen past hours (TestAdminDevices), which
	// the fixed clock of a script cannot give.
	"admin_devices": "TestAdminDevices",
	// It needs a day's budget of device events first (TestCollectDeviceDailyBudget).
	"error_collect_budget": "TestCollectDeviceDailyBudget",
	// Entries recorded at chosen past times, one past the 7-day window.
	"admin_evaluations": "TestAdminEvaluations",
	// Charges on chosen past days.
	"admin_usage": "TestAdminUsage",
	// Needs a cluster configuration store where another node wrote first.
	"error_account_conflict": "TestAdminWriteThatLostARaceAnswers409",
}

// TestHandlerScriptsCoverGoldenFiles: every committed golden file of an
// answer is named by a handler script, so each golden case sits beside its
// request.
func TestHandlerScriptsCoverGoldenFiles(t *testing.T) {
	var scripts strings.Builder
	files, err := filepath.Glob("testdata/handlers/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		scripts.Write(b)
	}
	goldens, err := filepath.Glob("testdata/golden/*.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range goldens {
		name := strings.TrimSuffix(filepath.Base(g), ".json")
		if _, ok := goldenWithoutScript[name]; ok {
			continue
		}
		if !strings.Contains(scripts.String(), "golden="+name+"\n") && !strings.Contains(scripts.String(), "golden="+name+" ") {
			t.Errorf("golden file %s has no handler script case (golden=%s)", g, name)
		}
	}
}
