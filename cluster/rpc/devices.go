package rpc

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/storage"
)

// LocalDevices is the node's own device history (*devicehist.Client), read
// for the admin device list.
type LocalDevices interface {
	Devices(customer string, limit int, now time.Time) ([]devicehist.DeviceView, error)
}

// maxDeviceLines bounds a Devices answer (the admin list shows at most
// devicehist.DevicesLimit).
const maxDeviceLines = 1000

// DeviceList is the admin device list in a cluster: an account's devices
// are read where its history lives, at the owner of its shard (one round
// trip from any other node).
type DeviceList struct {
	q     *Quota
	local LocalDevices
}

// DeviceList returns the device list over local that reaches the owners
// through q's connections.
func (q *Quota) DeviceList(local LocalDevices) *DeviceList { return &DeviceList{q: q, local: local} }

// Devices lists the account's most recently seen devices at its owner. An
// owner that cannot be reached answers devicehist.ErrUnavailable (503).
func (d *DeviceList) Devices(customer string, limit int, now time.Time) ([]devicehist.DeviceView, error) {
	if limit <= 0 || limit > maxDeviceLines {
		limit = devicehist.DevicesLimit
	}
	out, err := route(d.q, &d.q.remote, customer,
		func() ([]devicehist.DeviceView, error) { return d.local.Devices(customer, limit, now) },
		func(ctx context.Context, cli NodeClient, token int64) ([]devicehist.DeviceView, int64, error) {
			rep, err := cli.Devices(ctx, &DevicesRequest{Version: version, Account: customer, Limit: int64(limit), NowUnixNano: now.UnixNano(), Token: token})
			if err != nil {
				return nil, 0, err
			}
			v, err := deviceViewsOf(rep, limit)
			return v, rep.GetToken(), err
		})
	switch {
	case status.Code(err) == codes.Unimplemented:
		// An owner that predates Devices (a rolling deploy): this node's
		// own list, as before.
		return d.local.Devices(customer, limit, now)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", devicehist.ErrUnavailable, err)
	}
	return out, nil
}

// Devices implements NodeServer.
func (s *Server) Devices(ctx context.Context, r *DevicesRequest) (*DevicesReply, error) {
	if r.GetVersion() == 0 || r.GetAccount() == "" || len(r.GetAccount()) > storage.MaxHistCustomer || r.GetLimit() <= 0 || r.GetLimit() > maxDeviceLines {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("%v: devices of %q, %d of them", errBadRequest, r.GetAccount(), r.GetLimit()))
	}
	if s.cfg.Devices == nil {
		return nil, status.Error(codes.Unavailable, "cluster rpc: this node keeps no device history")
	}
	token, done, err := s.own(ctx, r.Account, r.Token)
	if err != nil {
		return nil, err
	}
	defer done()
	list, err := s.cfg.Devices.Devices(r.Account, int(r.Limit), s.cfg.Now())
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	rep := &DevicesReply{Version: version, Token: token, Devices: make([]*DeviceLine, len(list))}
	for i, d := range list {
		rep.Devices[i] = &DeviceLine{VisitorId: d.VisitorID, FirstSeenUnixNano: unixNano(d.FirstSeen), LastSeenUnixNano: unixNano(d.LastSeen),
			Visits: int64(d.Visits), LinkedAccounts: int64(d.LinkedAccounts)}
	}
	return rep, nil
}

// deviceViewsOf checks and converts an owner's list.
func deviceViewsOf(r *DevicesReply, limit int) ([]devicehist.DeviceView, error) {
	if len(r.GetDevices()) > limit {
		return nil, fmt.Errorf("cluster rpc: %d devices answered for at most %d: %w", len(r.Devices), limit, errBadRequest)
	}
	out := make([]devicehist.DeviceView, len(r.Devices))
	for i, d := range r.Devices {
		if d.VisitorId == "" || len(d.VisitorId) > storage.MaxHistDevice || d.Visits < 0 || d.LinkedAccounts < 0 || d.Visits > maxFactCount || d.LinkedAccounts > maxFactCount {
			return nil, fmt.Errorf("cluster rpc: a device line %v: %w", d, errBadRequest)
		}
		out[i] = devicehist.DeviceView{VisitorID: d.VisitorId, FirstSeen: fromUnixNano(d.FirstSeenUnixNano), LastSeen: fromUnixNano(d.LastSeenUnixNano),
			Visits: int(d.Visits), LinkedAccounts: int(d.LinkedAccounts)}
	}
	return out, nil
}
