package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape is one parsed exposition.
type scrape map[string]*dto.MetricFamily

// scrapeMetrics reads url (a /metrics) with the bearer, if any, and parses
// the text exposition as Prometheus would.
func scrapeMetrics(t *testing.T, url, bearer string) scrape {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", UserAgent)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("GET %s: content type %q", url, ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the exposition of %s: %v", url, err)
	}
	return fams
}

// value is the counter or gauge of name whose labels include want, or -1
// when there is none.
func (s scrape) value(name string, want ...string) float64 {
	f := s[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(want); i += 2 {
			if label(m, want[i]) != want[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// labels lists the values label takes in family name.
func (s scrape) labels(name, label string) []string {
	var out []string
	for _, m := range s[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out = append(out, l.GetValue())
			}
		}
	}
	return out
}

// TestMetricsScrape drives the binary through evaluations (test and live),
// a quota refusal and two webhook deliveries, then scrapes /metrics on the
// API listener (operator token) and on --metrics-addr (no auth), parses the
// exposition as Prometheus does and checks the figures.
func TestMetricsScrape(t *testing.T) {
	s := Start(t, bin, "--allow-private-webhooks", "--metrics-addr", "127.0.0.1:0")
	if s.MetricsURL == "" {
		t.Fatalf("no metrics listener logged:\n%s", s.Logs())
	}
	// Nobody but the operator reads it on the API listener.
	for _, bearer := range []string{"", "sk_live_nope"} {
		if r := s.Do(t, Req{Path: "/metrics", Bearer: bearer}); r.Status != 401 || !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("/metrics with bearer %q: %d %v", bearer, r.Status, r.Header)
		}
	}

	capped := s.CreateAccount(t, map[string]any{"email": "metrics@example.com", "plan": "custom", "hourly_limit": 3, "monthly_limit": nil})
	for i, tok := range []string{"test_vpn", "test_tor"} {
		if st, m := evalJSON(t, s, capped.LiveKey, map[string]any{"token": tok}); st != 200 {
			t.Fatalf("evaluate %d: %d %v", i, st, m)
		}
	}
	live := collectToken(t, s, capped.PublishableKey, "73.0.0.1", nil)
	st, liveAnswer := evalJSON(t, s, capped.LiveKey, map[string]any{"token": live})
	if st != 200 {
		t.Fatalf("live evaluate: %d %v", st, liveAnswer)
	}
	if st, m := evalJSON(t, s, capped.LiveKey, map[string]any{"token": "test_clean"}); st != 429 {
		t.Fatalf("fourth evaluate of a 3/h key: %d %v", st, m)
	}

	// A body over the 64 KiB limit is refused while it is read, before any
	// route: counted as "unreadable".
	if r := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: capped.LiveKey, Body: []byte(`{"token":"` + strings.Repeat("x", 70<<10) + `"}`)}); r.Status != 413 {
		t.Fatalf("oversized body: %d", r.Status)
	}

	// One webhook delivered, one failing (retried in a minute).
	rcv := newHookReceiver(t)
	for _, c := range []struct{ email, path string }{{"hook-ok@example.com", "/ok"}, {"hook-fail@example.com", "/fail"}} {
		a := s.CreateAccount(t, map[string]any{"email": c.email, "plan": "growth"})
		base := "/admin/v1/accounts/" + a.ID
		if r := s.Admin(t, "PUT", base+"/webhook", map[string]any{"url": rcv.URL + c.path}); r.Status != 200 {
			t.Fatalf("webhook: %d %s", r.Status, r.Body)
		}
		if r := s.Admin(t, "POST", base+"/webhook/test", nil); r.Status != 202 {
			t.Fatalf("webhook test: %d %s", r.Status, r.Body)
		}
	}
	rcv.waitHits(t, 2)

	// The outcome is counted once the receiver's answer is back in its
	// shard: wait for it (real time, bounded) on the open listener.
	var open scrape
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		open = scrapeMetrics(t, s.MetricsURL+"/metrics", "")
		if open.value("fraudd_webhook_attempts_total", "outcome", "delivered") == 1 && open.value("fraudd_webhook_attempts_total", "outcome", "retrying") == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook outcomes: delivered %v, retrying %v", open.value("fraudd_webhook_attempts_total", "outcome", "delivered"),
				open.value("fraudd_webhook_attempts_total", "outcome", "retrying"))
		}
	}
	op := scrapeMetrics(t, s.URL+"/metrics", AdminToken)

	liveDecision, _ := liveAnswer["decision"].(string)
	for _, sc := range []struct {
		name string
		got  scrape
	}{{"--metrics-addr", open}, {"API listener", op}} {
		for _, c := range []struct {
			name   string
			labels []string
			want   float64
		}{
			{"fraudd_http_requests_total", []string{"route", "/v1/evaluate", "status", "200"}, 3},
			{"fraudd_http_requests_total", []string{"route", "/v1/evaluate", "status", "429"}, 1},
			{"fraudd_http_requests_total", []string{"route", "/metrics", "status", "401"}, 2},
			{"fraudd_http_requests_total", []string{"route", "unreadable", "status", "413"}, 1},
			{"fraudd_http_request_duration_seconds", []string{"route", "/v1/evaluate"}, 4},
			{"fraudd_decisions_total", []string{"mode", "test", "decision", "review"}, 1},
			{"fraudd_decisions_total", []string{"mode", "test", "decision", "block"}, 1},
			{"fraudd_decisions_total", []string{"mode", "live", "decision", liveDecision}, 1},
			{"fraudd_decision_reasons_total", []string{"mode", "test", "reason", "vpn_detected"}, 1},
			{"fraudd_refusals_total", []string{"limit", "hourly"}, 1},
			{"fraudd_refusals_total", []string{"limit", "monthly"}, 0},
			{"fraudd_webhook_attempts_total", []string{"outcome", "delivered"}, 1},
			{"fraudd_webhook_attempts_total", []string{"outcome", "retrying"}, 1},
			{"fraudd_webhook_attempts_total", []string{"outcome", "failed"}, 0},
			{"fraudd_actor_shards_down", nil, 0},
		} {
			if got := sc.got.value(c.name, c.labels...); got != c.want {
				t.Errorf("%s: %s%v = %v, want %v", sc.name, c.name, c.labels, got, c.want)
			}
		}
		// Figures whose exact value the test cannot know, only that they
		// are there and sane.
		for _, c := range []struct {
			name   string
			labels []string
			min    float64
		}{
			{"fraudd_store_sync_seconds", nil, 1}, // the start's probe syncs
			{"fraudd_store_commits_total", nil, 1},
			{"fraudd_pebble_read_amplification", nil, 0},
			{"fraudd_pebble_compaction_debt_bytes", nil, 0},
			{"fraudd_pebble_block_cache_hits_total", nil, 0},
			{"fraudd_pebble_disk_bytes", nil, 1},
			{"fraudd_feed_age_seconds", []string{"feed", "tor"}, 1},
			{"fraudd_feed_entries", []string{"feed", "tor"}, 1},
			{"fraudd_group_commit_groups_total", []string{"committer", "quota"}, 0},
			{"fraudd_build_info", nil, 1},
			{"process_resident_memory_bytes", nil, 1},
		} {
			if got := sc.got.value(c.name, c.labels...); got < c.min {
				t.Errorf("%s: %s%v = %v, want at least %v", sc.name, c.name, c.labels, got, c.min)
			}
		}
		if kinds := strings.Join(sc.got.labels("fraudd_actor_mailbox_depth", "kind"), ","); !strings.Contains(kinds, "quota") || !strings.Contains(kinds, "webhook") {
			t.Errorf("%s: mailbox depth kinds %q", sc.name, kinds)
		}
	}
}
