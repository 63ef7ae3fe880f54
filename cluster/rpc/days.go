package rpc

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/storage"
)

// The console's daily usage in a cluster: each member stores, per UTC day,
// the counted calls it charged (as the owner of the account's shard, or
// from a slice the owner lent it), so an account's day is the sum over the
// members, read with one Days call to each.

// maxDays bounds a Days request.
const maxDays = 366

// DayStore is a node's own store of daily counts (*storage.DB).
type DayStore interface {
	DailyUsage(account string, first, last storage.Day) ([]storage.DayUsage, error)
}

// Days implements NodeServer: this node's own daily counts.
func (s *Server) Days(ctx context.Context, r *DaysRequest) (*DaysReply, error) {
	first, last := storage.Day(r.GetFirst()), storage.Day(r.GetLast())
	if r.GetVersion() == 0 || r.GetAccount() == "" || len(r.GetAccount()) > maxObsAccountID || last < first || last-first >= maxDays {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("%v: days of %q from %d to %d", errBadRequest, r.GetAccount(), first, last))
	}
	ds, ok := s.cfg.Shares.(DayStore)
	if !ok {
		return nil, status.Error(codes.Unavailable, "cluster rpc: this node keeps no daily counts")
	}
	if err := s.flush(ctx); err != nil {
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("days of %q: %v", r.Account, err))
	}
	days, err := ds.DailyUsage(r.Account, first, last)
	if err != nil {
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("days of %q: %v", r.Account, err))
	}
	reply := &DaysReply{Version: version, Node: s.cfg.Owners.Self(), Days: make([]*DayCount, len(days))}
	for i, d := range days {
		reply.Days[i] = &DayCount{Day: uint32(d.Day), Used: d.Used, Lookups: d.Lookups}
	}
	return reply, nil
}

// Days asks every other live member, in parallel and within Timeout, for
// its daily counts of account from first to last, and adds them to days
// (one per day from first, as storage.DB.DailyUsage answers). Members that
// did not answer are listed in missing: their days are left out.
func (q *Quota) Days(ctx context.Context, account string, first, last storage.Day, days []storage.DayUsage) (missing []string) {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	eachOther(q, func(id string) ([]*DayCount, error) { return q.days(ctx, id, account, first, last) },
		func(id string, got []*DayCount, err error) {
			if err != nil {
				q.log.Warn("cluster: a member's daily counts are missing", "member", id, "account", account, "err", err)
				missing = append(missing, id)
				return
			}
			for i, d := range got {
				days[i].Used += d.Used
				days[i].Lookups += d.Lookups
			}
		})
	return missing
}

func (q *Quota) days(ctx context.Context, id, account string, first, last storage.Day) ([]*DayCount, error) {
	p, err := q.peer(id)
	if err != nil {
		return nil, err
	}
	r, err := p.cli.Days(ctx, &DaysRequest{Version: version, Account: account, First: uint32(first), Last: uint32(last)})
	if err != nil {
		return nil, err
	}
	return daysOf(r, id, first, last)
}

// daysOf checks a member's answer: its own, one day each from first to
// last in order, no negative count.
func daysOf(r *DaysReply, id string, first, last storage.Day) ([]*DayCount, error) {
	if r.GetNode() != id || last < first || len(r.GetDays()) != int(last-first)+1 {
		return nil, fmt.Errorf("member %s answered %d days for %d: %w", id, len(r.Days), last-first+1, errBadRequest)
	}
	for i, d := range r.Days {
		if d == nil || storage.Day(d.GetDay()) != first+storage.Day(i) || d.GetUsed() < 0 || d.GetLookups() < 0 {
			return nil, fmt.Errorf("member %s answered day %d out of order or negative: %w", id, d.GetDay(), errBadRequest)
		}
	}
	return r.Days, nil
}

// DailyUsage implements quota.DayStore: this node's days plus every other
// live member's. A member that does not answer is left out (the console
// shows less for the days it charged until it answers again).
func (s *SharedStore) DailyUsage(account string, first, last storage.Day) ([]storage.DayUsage, error) {
	ds, ok := s.local.(DayStore)
	if !ok {
		return nil, fmt.Errorf("cluster: the node's store keeps no daily counts")
	}
	days, err := ds.DailyUsage(account, first, last)
	if err != nil || len(days) == 0 {
		return days, err
	}
	if q := s.peers.Load(); q != nil {
		q.Days(context.Background(), account, first, last, days)
	}
	return days, nil
}
