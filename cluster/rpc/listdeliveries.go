package rpc

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/fraudd/fraudd/actors/webhook"
	"github.com/fraudd/fraudd/storage"
)

// DeliveryList is an account's webhook delivery log in a cluster (GET
// /admin/v1/accounts/{id}/webhook/deliveries): each node delivers the
// events of the evaluations it served, and logs its attempts; the list is
// every member's, merged (lists.go).
type DeliveryList struct {
	q     *Quota
	local LocalDeliveries
}

// DeliveryList returns the merged log over this node's own.
func (q *Quota) DeliveryList(local LocalDeliveries) *DeliveryList {
	return &DeliveryList{q: q, local: local}
}

// Recent is webhook.Service.Recent over the cluster: the account's
// webhook.ListLen most recent attempts of the last webhook.Retention as
// of now, newest first, whichever member made them.
func (d *DeliveryList) Recent(account string, now time.Time) ([]*storage.Delivery, error) {
	own, err := d.local.Recent(account, now)
	if err != nil {
		return nil, err
	}
	parts := gather(d.q, "webhook deliveries", account, own, func(ctx context.Context, cli NodeClient, id string) ([]*storage.Delivery, error) {
		r, err := cli.Deliveries(ctx, &ListRequest{Version: version, Account: account, Limit: webhook.ListLen, NowUnixNano: now.UnixNano()})
		if err != nil {
			return nil, err
		}
		return deliveriesOf(r, id, account, webhook.ListLen)
	})
	return mergeNewest(parts, webhook.ListLen, newerDelivery), nil
}

// newerDelivery orders as the store's key does, newest first: the
// attempt's start, then its event id and attempt number.
func newerDelivery(a, b *storage.Delivery) int {
	if c := b.At.Compare(a.At); c != 0 {
		return c
	}
	if c := cmp.Compare(b.EventID, a.EventID); c != 0 {
		return c
	}
	return cmp.Compare(b.Attempt, a.Attempt)
}

// Deliveries implements NodeServer: this node's own part.
func (s *Server) Deliveries(_ context.Context, r *ListRequest) (*DeliveriesReply, error) {
	if err := listRequestOf(r, webhook.ListLen, false, true); err != nil {
		return nil, err
	}
	l, ok := s.listsOf()
	if !ok || l.Deliveries == nil {
		return nil, unavailable("this node keeps no webhook deliveries")
	}
	list, err := l.Deliveries.Recent(r.Account, fromUnixNano(r.NowUnixNano))
	if err != nil {
		return nil, unavailable(fmt.Sprintf("webhook deliveries of %q: %v", r.Account, err))
	}
	rep := &DeliveriesReply{Version: version, Node: s.cfg.Owners.Self(), Deliveries: make([]*DeliveryLine, 0, min(len(list), int(r.Limit)))}
	for _, d := range list[:min(len(list), int(r.Limit))] {
		rep.Deliveries = append(rep.Deliveries, &DeliveryLine{EventId: clip(d.EventID, maxListWord), Event: clip(d.Event, maxListWord),
			Attempt: int64(d.Attempt), EventAtUnixNano: unixNano(d.EventAt), AtUnixNano: unixNano(d.At), DurationNanos: int64(d.Duration),
			Url: clip(d.URL, maxListText), StatusCode: int64(d.StatusCode), Error: clip(d.Error, maxListText), NextAtUnixNano: unixNano(d.NextAt)})
	}
	return rep, nil
}

// deliveriesOf checks and converts a member's part: its own, at most limit
// lines, newest first, within the bounds the server keeps (lists.go),
// with an attempt from 1, a status code of an HTTP answer or 0, and no
// negative duration.
func deliveriesOf(r *DeliveriesReply, id, account string, limit int) ([]*storage.Delivery, error) {
	if err := checkNode(r.GetNode(), id, "webhook deliveries"); err != nil {
		return nil, err
	}
	if len(r.GetDeliveries()) > limit {
		return nil, fmt.Errorf("member %s answered %d webhook deliveries for at most %d: %w", id, len(r.Deliveries), limit, errBadRequest)
	}
	out := make([]*storage.Delivery, len(r.Deliveries))
	var last time.Time
	for i, d := range r.Deliveries {
		at := fromUnixNano(d.GetAtUnixNano())
		if d == nil || d.AtUnixNano <= 0 || (i > 0 && at.After(last)) || d.Attempt < 1 || d.Attempt > 255 ||
			d.StatusCode < 0 || d.StatusCode > 999 || d.DurationNanos < 0 || d.EventId == "" ||
			!wordsOK([]string{d.EventId, d.Event}) || len(d.Url) > maxListText || len(d.Error) > maxListText {
			return nil, fmt.Errorf("member %s answered webhook delivery %d out of order or out of bounds: %w", id, i, errBadRequest)
		}
		last = at
		out[i] = &storage.Delivery{Account: account, EventID: d.EventId, Event: d.Event, Attempt: int(d.Attempt),
			EventAt: fromUnixNano(d.EventAtUnixNano), At: at, Duration: time.Duration(d.DurationNanos), URL: d.Url,
			StatusCode: int(d.StatusCode), Error: d.Error, NextAt: fromUnixNano(d.NextAtUnixNano)}
	}
	return out, nil
}
