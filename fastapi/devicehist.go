package fastapi

import (
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/wire"
)

// DeviceLister lists an account's devices (*devicehist.Client, or cluster
// mode's list read at the account's owner).
type DeviceLister interface {
	Devices(customer string, limit int, now time.Time) ([]devicehist.DeviceView, error)
}

// adminDevices is GET /admin/v1/accounts/{id}/devices: the account's 50 most
// recently seen devices, newest first (ADMIN.md views, SPEC §8).
func (s *Server) adminDevices(ctx *fasthttp.RequestCtx, r *request) {
	v, ref := s.account(r)
	if ref != nil {
		s.refuse(ctx, ref)
		return
	}
	out := []wire.AdminDevice{}
	var lister DeviceLister
	if s.deps.DeviceHist != nil {
		lister = s.deps.DeviceHist
	}
	if s.deps.DeviceList != nil {
		lister = s.deps.DeviceList
	}
	if lister != nil {
		list, err := lister.Devices(v.ID, devicehist.DevicesLimit, r.Now)
		switch {
		case errors.Is(err, devicehist.ErrUnavailable):
			s.storageUnavailable(ctx)
			return
		case err != nil:
			s.serverError(ctx, "list devices", err)
			return
		}
		for _, d := range list {
			out = append(out, wire.AdminDevice{VisitorID: d.VisitorID, FirstSeen: fmtTime(d.FirstSeen), LastSeen: fmtTime(d.LastSeen),
				Visits: d.Visits, LinkedAccounts: d.LinkedAccounts})
		}
	}
	s.writeJSON(ctx, fasthttp.StatusOK, out)
}
