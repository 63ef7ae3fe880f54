package bench

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// call does one set-up request and returns the status and a copy of the body.
func call(t *Target, method, path string, header map[string]string, body []byte) (int, []byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI(path)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if body != nil {
		if req.Header.ContentType() == nil || len(req.Header.ContentType()) == 0 {
			req.Header.SetContentType("application/json")
		}
		req.SetBody(body)
	}
	if err := t.Do(req, resp, 10*time.Second); err != nil {
		return 0, nil, err
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...), nil
}

// Admin creates accounts through fraudd's operator API (ADMIN.md).
type Admin struct {
	Target *Target
	Token  string
	// Tag goes into every email address so that runs against a long-lived
	// server never collide (duplicate emails answer 409).
	Tag string
	seq atomic.Int64
}

// Account is a created account's id and secrets.
type Account struct {
	ID             string `json:"id"`
	Email          string `json:"email"`
	Plan           string `json:"plan"`
	LiveKey        string `json:"live_key"`
	TestKey        string `json:"test_key"`
	PublishableKey string `json:"publishable_key"`
}

// CreateAccount creates an account that nothing throttles: plan "custom"
// with null hourly and monthly limits, or "public_interest".
func (a *Admin) CreateAccount(label, plan string) (*Account, error) {
	email := fmt.Sprintf("bench-%s-%s-%d@example.com", strings.ReplaceAll(label, "_", "-"), a.Tag, a.seq.Add(1))
	body := map[string]any{"email": email, "plan": plan}
	if plan == "custom" {
		body["hourly_limit"] = nil
		body["monthly_limit"] = nil
	}
	b, _ := json.Marshal(body)
	status, out, err := call(a.Target, "POST", "/admin/v1/accounts",
		map[string]string{"Authorization": "Bearer " + a.Token}, b)
	if err != nil {
		return nil, fmt.Errorf("create account: %w", err)
	}
	if status != 201 {
		return nil, fmt.Errorf("create account: HTTP %d: %s", status, snippet(out))
	}
	var acc Account
	if err := json.Unmarshal(out, &acc); err != nil {
		return nil, fmt.Errorf("create account: %w", err)
	}
	if acc.LiveKey == "" || acc.TestKey == "" {
		return nil, fmt.Errorf("create account: no keys in the answer: %s", snippet(out))
	}
	return &acc, nil
}

// snippet shortens a body for an error message.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
