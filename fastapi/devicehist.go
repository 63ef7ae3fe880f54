package fastapi

import (
	"errors"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/wire"
)

// Device history on evaluate, in three calls:
//
//	f, err := s.observeDevice(r, req.FingerprintEventID, visitorID, req.AccountID, &st.in.Network)
//	// err: log it and go on with zero facts (fail open; nothing else changes)
//	applyDeviceHistory(&st.in, &f, live, hist.TimesSeen, hist.FirstSeen, r.now) // before score.Evaluate
//	// in the builder, once st.device is filled:
//	st.device.CustomerHistory = st.hist.device(&st.device, &f, hist.TimesSeen, hist.FirstSeen)
//	r.Account = st.hist.account(&f, live)
//
// where hist is actors/events' Resolved.History (the global times_seen and
// first_seen), live is "a live key, not a test key or test token", and
// st.hist is a histBlock inside the pooled evalState.

// observeDevice records this evaluation's device and account evidence on
// the customer's device-history shard and answers its facts, in one actor
// round trip. deviceID is the resolved event's visitor id ("" without device
// evidence), accountID the request's accountId ("" when not sent); both may
// point into the request buffer (they are copied). A personal test key reads
// without recording. Errors mean "no facts": answer without them.
func (s *Server) observeDevice(r *request, eventID, deviceID, accountID string, n *score.Network) (devicehist.Facts, error) {
	if s.deps.DeviceHist == nil || r.auth.View == nil || (deviceID == "" && accountID == "") {
		return devicehist.Facts{}, nil
	}
	o := devicehist.Observation{
		Customer: r.auth.View.ID, Test: r.auth.Kind == accounts.KeyTest,
		EventID: eventID, DeviceID: deviceID, AccountID: accountID,
		SharedExit: n.SharedExit(), Now: r.now,
	}
	if !n.Degraded {
		o.IP = n.IP
	}
	return s.deps.DeviceHist.Observe(o)
}

// applyDeviceHistory sets the engine inputs that come from device history:
// high_activity (the customer's own 24 h visits, or the device's global
// sightings from actors/events: timesSeen, firstSeen) and multi_account
// when a device event resolved (in.Device.Present), and the account counts
// when an accountId came with a live key.
func applyDeviceHistory(in *score.Input, f *devicehist.Facts, live bool, timesSeen int64, firstSeen, now time.Time) {
	if in.Device.Present {
		in.Device.HighActivity = devicehist.HighActivity(f.Visits24h, timesSeen, firstSeen, now)
		in.Device.MultiAccount = f.Device && f.Account && f.LinkedAccounts > 1
	}
	in.Account = scoreAccount(f, live)
}

// scoreAccount is the engine's view of the account object; zero (no
// account reasons) without an accountId or off a live key.
func scoreAccount(f *devicehist.Facts, live bool) score.Account {
	if !live || !f.Account {
		return score.Account{}
	}
	a := score.Account{AccountDevices24h: f.AccountDevices24h}
	if f.Device {
		a.DeviceAccounts24h, a.NewDevice = f.DeviceAccounts24h, f.NewDevice
	}
	if f.IPCounted {
		a.IPAccounts24h = f.IPAccounts24h
	}
	return a
}

// histBlock is the device-history part of one evaluate answer. It lives by
// value in the pooled evalState: the nullable fields point into it and its
// time strings are formatted into its own buffers, so filling it allocates
// nothing. What it returns is valid until it is filled again.
type histBlock struct {
	acct      wire.EvalAccount
	history   wire.CustomerHistory
	devAccts  int
	ipAccts   int
	newDevice bool
	linked    int64
	stamps    [3][len(time.RFC3339) + 8]byte
}

// stamp formats t (UTC, seconds) into buffer i without allocating.
func (b *histBlock) stamp(i int, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	s := t.UTC().AppendFormat(b.stamps[i][:0], time.RFC3339)
	return unsafe.String(unsafe.SliceData(s), len(s))
}

// account is the `account` object: nil (absent) unless an accountId came
// with a live key.
func (b *histBlock) account(f *devicehist.Facts, live bool) *wire.EvalAccount {
	if !live || !f.Account {
		return nil
	}
	b.acct = wire.EvalAccount{DevicesForAccount24h: f.AccountDevices24h, RelatedAccounts90d: f.RelatedAccounts90d}
	if f.Device {
		b.devAccts, b.newDevice = f.DeviceAccounts24h, f.NewDevice
		b.acct.AccountsOnDevice24h, b.acct.NewDevice = &b.devAccts, &b.newDevice
	}
	if f.IPCounted {
		b.ipAccts = f.IPAccounts24h
		b.acct.AccountsFromIP24h = &b.ipAccts
	}
	return &b.acct
}

// device fills the device block's history fields — times_seen, first_seen
// and returning from the device's global history (actors/events), and
// linked_accounts (only with an accountId) and multi_account from f — and
// returns device.customer_history, nil when f has no device facts.
func (b *histBlock) device(d *wire.EvalDevice, f *devicehist.Facts, timesSeen int64, firstSeen time.Time) *wire.CustomerHistory {
	d.TimesSeen = timesSeen
	d.FirstSeen = b.stamp(0, firstSeen)
	d.Returning = timesSeen > 1
	d.LinkedAccounts, d.MultiAccount = nil, false
	if !f.Device {
		return nil
	}
	if f.Account {
		b.linked = int64(f.LinkedAccounts)
		d.LinkedAccounts = &b.linked
		d.MultiAccount = f.LinkedAccounts > 1
	}
	h := &f.History
	b.history = wire.CustomerHistory{
		Visits: h.Visits, Returning: h.Returning(), FirstSeen: b.stamp(1, h.FirstSeen), LastSeen: b.stamp(2, h.LastSeen),
		Accounts: h.Accounts, WindowDays: devicehist.WindowDays,
	}
	return &b.history
}

// adminDevices is GET /admin/v1/accounts/{id}/devices: the account's 50 most
// recently seen devices, newest first (ADMIN.md views, SPEC §8).
func (s *Server) adminDevices(ctx *fasthttp.RequestCtx, r *request) {
	v := s.account(ctx, r)
	if v == nil {
		return
	}
	out := []wire.AdminDevice{}
	if s.deps.DeviceHist != nil {
		list, err := s.deps.DeviceHist.Devices(v.ID, devicehist.DevicesLimit, r.now)
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

// applyHistory runs the device-history hop for a live evaluation and feeds
// its facts to the engine and the builder. A failure is logged and the
// answer goes on without history.
func (s *Server) applyHistory(r *request, st *evalState, o *evalOpts, req *evalRequest) {
	deviceID := ""
	if st.in.Device.Present {
		deviceID = st.in.Device.VisitorID
	}
	f, err := s.observeDevice(r, req.FingerprintEventID, deviceID, req.AccountID, &st.in.Network)
	if err != nil {
		s.log.Warn("device history not observed", "err", err)
		return
	}
	o.live = r.auth.Kind != accounts.KeyTest
	if o.device != nil {
		o.timesSeen = o.device.TimesSeen
		o.firstSeen = o.deviceFirstSeen
	}
	st.histFacts = f
	o.hist = &st.histFacts
	applyDeviceHistory(&st.in, &st.histFacts, o.live, o.timesSeen, o.firstSeen, r.now)
}
