package fastapi

import (
	"errors"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/webhook"
	"github.com/fraudd/fraudd/wire"
)

// allowPrivateWebhooks reports whether receivers may be http:// or on
// loopback and private addresses (--allow-private-webhooks).
func (s *Server) allowPrivateWebhooks() bool {
	return s.deps.Webhooks != nil && s.deps.Webhooks.AllowPrivate()
}

// adminWebhookTest is POST /admin/v1/accounts/{id}/webhook/test: 202 and a
// test event (same shape as threat.detected, sample values) queued for the
// account's receiver; 409 when no URL is set; 503 storage_unavailable when
// the event could not be stored as pending (nothing is sent then: the 202
// promises a delivery that survives a restart and is listed).
func (s *Server) adminWebhookTest(ctx *fasthttp.RequestCtx, r *request) {
	v, ref := s.account(r)
	if ref != nil {
		s.refuse(ctx, ref)
		return
	}
	if v.WebhookURL == "" {
		s.writeError(ctx, fasthttp.StatusConflict, checks.MsgNoWebhookURL, "",
			checks.HintNoWebhookURL)
		return
	}
	if s.deps.Webhooks == nil {
		s.writeError(ctx, fasthttp.StatusServiceUnavailable, checks.MsgWebhooksOff, "", "")
		return
	}
	id, err := s.deps.Webhooks.SendTest(v.ID, r.Now)
	if err != nil {
		if errors.Is(err, webhook.ErrUnavailable) {
			s.storageUnavailable(ctx)
			return
		}
		if errors.Is(err, webhook.ErrQueueFull) {
			s.writeError(ctx, fasthttp.StatusConflict, checks.MsgWebhookQueueFull, "", checks.HintWebhookQueueFull)
			return
		}
		s.serverError(ctx, "send webhook test", err)
		return
	}
	s.writeJSON(ctx, fasthttp.StatusAccepted, &wire.WebhookTest{EventID: id, Event: webhook.KindTest})
}

// adminWebhookDeliveries is GET /admin/v1/accounts/{id}/webhook/deliveries:
// the 25 most recent delivery attempts, newest first.
func (s *Server) adminWebhookDeliveries(ctx *fasthttp.RequestCtx, r *request) {
	v, ref := s.account(r)
	if ref != nil {
		s.refuse(ctx, ref)
		return
	}
	out := []wire.WebhookDelivery{}
	if lister := s.deliveryLister(); lister != nil {
		recs, err := lister.Recent(v.ID, r.Now)
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
