package fastapi

import (
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/webhook"
	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/wire"
)

// notifyWebhook queues a threat.detected webhook for a live, non-test-key
// evaluation that SPEC §6 calls a threat (score.ThreatType), fire-and-forget.
// Accounts without a receiver cost one field check.
func (s *Server) notifyWebhook(r *request, in *score.Input, res *score.Result) {
	v := r.auth.View
	if s.deps.Webhooks == nil || v == nil || v.WebhookURL == "" {
		return
	}
	if ev, ok := webhookEvent(v.ID, r.now, in, res); ok {
		s.deps.Webhooks.Notify(ev)
	}
}

// webhookEvent builds the event of a webhook-worthy evaluation, mirroring
// the evaluate answer's fields. Everything it carries is copied: nothing may
// point into the request's buffers once it crosses into the actor.
func webhookEvent(account string, now time.Time, in *score.Input, res *score.Result) (*webhook.Event, bool) {
	tt, ok := score.ThreatType(res)
	if !ok {
		return nil, false
	}
	n, d := &in.Network, &in.Device
	ev := &webhook.Event{Account: account, At: now, ThreatType: tt, IP: "unknown"}
	det := &ev.Details
	if !n.Degraded {
		ev.IP = n.IP.String()
		det.Country = strings.Clone(n.Country)
		det.VPN, det.Tor, det.DCH = n.VPN, n.Tor, n.Datacenter
		det.Proxied = n.Proxy || n.PrivacyRelay || n.OpenProxy
	}
	det.PrivacyRelay = res.PrivacyRelay
	if d.Present {
		det.Bot = d.Automation
		det.Antidetect = d.Antidetect
		det.VirtualMachine = d.VirtualMachine
		det.Tampering = d.Antidetect || d.Emulator
	}
	det.Decision = res.Decision.String()
	// As on the evaluate answer: rule_matched with a rule-decided answer,
	// exception_matched with a pin-decided one.
	switch res.DecisionSource {
	case score.SourceRules:
		det.RuleMatched = res.RuleMatched.AppendStrings(nil)
	case score.SourceException:
		det.ExceptionMatched = res.AppendExceptions(nil)
		for i, name := range det.ExceptionMatched {
			det.ExceptionMatched[i] = strings.Clone(name)
		}
	}
	return ev, true
}

// allowPrivateWebhooks reports whether receivers may be http:// or on
// loopback and private addresses (--allow-private-webhooks).
func (s *Server) allowPrivateWebhooks() bool {
	return s.deps.Webhooks != nil && s.deps.Webhooks.AllowPrivate()
}

// adminWebhookTest is POST /admin/v1/accounts/{id}/webhook/test: 202 and a
// test event (same shape as threat.detected, sample values) queued for the
// account's receiver; 409 when no URL is set.
func (s *Server) adminWebhookTest(ctx *fasthttp.RequestCtx, r *request) {
	v := s.account(ctx, r)
	if v == nil {
		return
	}
	if v.WebhookURL == "" {
		s.writeError(ctx, fasthttp.StatusConflict, "No webhook URL is set for this account.", "",
			"Set one with PUT /admin/v1/accounts/{id}/webhook first.")
		return
	}
	if s.deps.Webhooks == nil {
		s.writeError(ctx, fasthttp.StatusServiceUnavailable, "Webhook delivery is not running.", "", "")
		return
	}
	id := s.deps.Webhooks.SendTest(v.ID, r.now)
	s.writeJSON(ctx, fasthttp.StatusAccepted, &wire.WebhookTest{EventID: id, Event: webhook.KindTest})
}

// adminWebhookDeliveries is GET /admin/v1/accounts/{id}/webhook/deliveries:
// the 25 most recent delivery attempts, newest first.
func (s *Server) adminWebhookDeliveries(ctx *fasthttp.RequestCtx, r *request) {
	v := s.account(ctx, r)
	if v == nil {
		return
	}
	out := []wire.WebhookDelivery{}
	if s.deps.Webhooks != nil {
		recs, err := s.deps.Webhooks.Recent(v.ID, r.now)
		if err != nil {
			s.adminFailure(ctx, "list webhook deliveries", err)
			return
		}
		for _, d := range recs {
			w := wire.WebhookDelivery{EventID: d.EventID, Event: d.Event, Attempt: d.Attempt, URL: d.URL,
				Timestamp: fmtTime(d.EventAt), AttemptedAt: fmtTime(d.At), DurationMs: d.Duration.Milliseconds()}
			if d.StatusCode != 0 {
				code := d.StatusCode
				w.StatusCode = &code
			}
			switch {
			case d.Error == "":
				w.Status = "delivered"
			case !d.NextAt.IsZero():
				w.Status = "retrying"
			default:
				w.Status = "failed"
			}
			if d.Error != "" {
				e := d.Error
				w.Error = &e
			}
			if !d.NextAt.IsZero() {
				next := fmtTime(d.NextAt)
				w.NextAttemptAt = &next
			}
			out = append(out, w)
		}
	}
	s.writeJSON(ctx, fasthttp.StatusOK, out)
}
