package fastapi

import (
	"errors"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/wire"
)

// adminDevices is GET /admin/v1/accounts/{id}/devices: the account's 50 most
// recently seen devices, newest first (ADMIN.md views, SPEC §8).
func (s *Server) adminDevices(ctx *fasthttp.RequestCtx, r *request) {
	v, ref := s.account(r)
	if ref != nil {
		s.refuse(ctx, ref)
		return
	}
	out := []wire.AdminDevice{}
	if s.deps.DeviceHist != nil {
		list, err := s.deps.DeviceHist.Devices(v.ID, devicehist.DevicesLimit, r.Now)
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
