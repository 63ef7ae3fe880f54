package devicehist

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/storage"
)

// The owner's half of the mirror (mirror.go): watches and their change
// feed. A customer's watchers live in its shard; every message that
// changes the customer's records pushes them, in the shard's order.

// maxWatchers bounds one customer's watchers (one per lease holder: a
// handful).
const maxWatchers = 64

// A watcher's first watch of a customer is also sent the customer's
// records the shard holds in memory (those used within its IdleAfter),
// newest first, at most maxHotRecords of them, hotChunk records or
// hotChunkBytes to a push (a frame far under gRPC's 4 MiB: one record is
// a few KiB at most). So a new holder's first evaluations of the
// customer's active end users, devices and addresses find them in its
// mirror: without them each such record, held at the owner and so in the
// holder's filter, sent one evaluation to the owner per holder.
const (
	maxHotRecords = 8192
	hotChunk      = 256
	hotChunkBytes = 512 << 10
)

// Messages of the watch.
type (
	// watchReq registers a watcher of a customer and asks for a snapshot.
	watchReq struct {
		q       obsReq
		watcher uint64
	}
	// unwatchReq drops a watcher of one customer, or (all) of every
	// customer of the shard.
	unwatchReq struct {
		customer string
		watcher  uint64
		all      bool
	}
	// pushEventReq hands a stored device event to the customer's watchers
	// (watcher not zero: to that one only).
	pushEventReq struct {
		customer, device string
		event            []byte
		watcher          uint64
	}
)

// watchSet is the watchers of one customer at its owner's shard.
type watchSet struct {
	customer string
	ids      []uint64
	// builds: the filters of first watches under way (filter.go);
	// pushed: the filter keys of the present records pushed since the
	// first of them began (pushedLost: too many), added when each is sent.
	builds     []*filterBuild
	pushed     []string
	pushedLost bool
}

// SetMirrorSink sets where the owner's shards send their pushes (nil:
// nowhere). sink runs on shard goroutines and must not block. Set it once
// before Watch.
func (c *Client) SetMirrorSink(sink func(MirrorPush)) {
	if sink == nil {
		c.sink.Store(nil)
		return
	}
	c.sink.Store(&sink)
}

// Watch registers watcher for the customer's records at its shard
// (idempotent) and has the shard push, to that watcher alone, a snapshot of
// the records keys names and of the account's related ones (every device
// and address its record lists), each present or absent. From then on
// every change the shard makes to the customer's records is pushed to
// each of its watchers, in the shard's order. It returns at once.
func (c *Client) Watch(customer string, watcher uint64, keys MirrorKeys) error {
	if c.stopped.Load() {
		return ErrStopped
	}
	m := &watchReq{watcher: watcher}
	o := Observation{Customer: customer, DeviceID: keys.DeviceID, AccountID: keys.AccountID, IP: keys.IP, SharedExit: keys.SharedExit}
	if err := c.prepare(o, &m.q); err != nil {
		return err
	}
	c.watched.Store(true)
	c.shards.Send(actors.HashString(customer), m)
	return nil
}

// IsWatched reports whether some watcher watches the customer now (as its
// shard last said): a caller builds an event to push only then.
func (c *Client) IsWatched(customer string) bool {
	if !c.watched.Load() {
		return false
	}
	_, ok := c.watchedSet.Load(customer)
	return ok
}

// PushEvent hands event (opaque here) to every watcher of the customer,
// with the customer's record of the event's device (present or absent),
// in the shard's order: the owner stored a device event for an account its
// lease holders mirror, so that their evaluations of it need not ask. It
// returns at once; a customer nobody watches gets nothing.
func (c *Client) PushEvent(customer, deviceID string, event []byte) {
	c.PushEventTo(customer, deviceID, 0, event)
}

// PushEventTo is PushEvent for one watcher of the customer (zero: all of
// them): an event the owner stored before that watcher began to watch.
func (c *Client) PushEventTo(customer, deviceID string, watcher uint64, event []byte) {
	if !c.watched.Load() || c.stopped.Load() || customer == "" || len(customer) > storage.MaxHistCustomer || len(deviceID) > storage.MaxHistDevice {
		return
	}
	c.shards.Send(actors.HashString(customer), &pushEventReq{customer: customer, device: deviceID, event: event, watcher: watcher})
}

// Unwatch drops watcher of the customer: it gets nothing more of it.
func (c *Client) Unwatch(customer string, watcher uint64) {
	if c.stopped.Load() || customer == "" || len(customer) > storage.MaxHistCustomer {
		return
	}
	c.shards.Send(actors.HashString(customer), &unwatchReq{customer: customer, watcher: watcher})
}

// UnwatchAll drops watcher of every customer (its stream ended).
func (c *Client) UnwatchAll(watcher uint64) {
	if c.stopped.Load() {
		return
	}
	c.shards.Broadcast(&unwatchReq{watcher: watcher, all: true})
}

// push hands the records one change-making message changed to every
// watcher of their customer (one push each, sharing recs).
func (s shard) push(customer string, recs []MirrorRecord) {
	ws := s.watchers[customer]
	if ws == nil || len(recs) == 0 {
		return
	}
	sink := s.sink.Load()
	if sink == nil {
		return
	}
	for _, w := range ws.ids {
		(*sink)(MirrorPush{Watcher: w, Customer: ws.customer, Records: recs})
	}
}

// parcel appends r to recs as a mirror record (absent: its identity only).
func (s shard) parcel(recs []MirrorRecord, r storage.HistRecord, absent bool) []MirrorRecord {
	if absent {
		r = blankOf(r)
	}
	b, err := storage.AppendHistParcel(nil, r)
	if err != nil {
		s.log.Warn("devicehist: record not mirrored", "err", err)
		return recs
	}
	if !absent {
		s.trackPushed(r)
	}
	return append(recs, MirrorRecord{Parcel: b, Absent: absent})
}

// blankOf is the empty record of r's identity.
func blankOf(r storage.HistRecord) storage.HistRecord {
	switch r := r.(type) {
	case *storage.HistCustomerDevice:
		return &storage.HistCustomerDevice{Customer: r.Customer, Device: r.Device}
	case *storage.HistAccount:
		return &storage.HistAccount{Customer: r.Customer, Hash: r.Hash}
	case *storage.HistAddress:
		return &storage.HistAddress{Customer: r.Customer, Addr: r.Addr}
	}
	return r
}

// pushObserved pushes what one observation changed.
func (s shard) pushObserved(customer string, de *deviceEntry, ae *accountEntry, ade *addressEntry) {
	if s.watchers[customer] == nil {
		return
	}
	var recs []MirrorRecord
	if de != nil {
		recs = s.parcel(recs, &de.rec, false)
	}
	if ae != nil {
		recs = s.parcel(recs, &ae.rec, false)
	}
	if ade != nil {
		recs = s.parcel(recs, &ade.rec, false)
	}
	s.push(customer, recs)
}

// pushMerged pushes the records one merge changed, per customer.
func (s shard) pushMerged(recs []storage.HistRecord, devices []*deviceEntry, accounts []*accountEntry, addresses []*addressEntry) {
	by := map[string][]MirrorRecord{}
	for i, r := range recs {
		cust := storage.HistCustomerOf(r)
		if s.watchers[cust] == nil {
			continue
		}
		switch {
		case devices[i] != nil:
			by[cust] = s.parcel(by[cust], &devices[i].rec, false)
		case accounts[i] != nil:
			by[cust] = s.parcel(by[cust], &accounts[i].rec, false)
		case addresses[i] != nil:
			by[cust] = s.parcel(by[cust], &addresses[i].rec, false)
		}
	}
	for cust, rs := range by {
		s.push(cust, rs)
	}
}

// resetWatchers tells every watcher of the customers match selects (nil:
// all, as for Take) that this node no longer speaks for their records, and
// forgets them.
func (s shard) resetWatchers(match func(string) bool) {
	sink := s.sink.Load()
	for cust, ws := range s.watchers {
		if match != nil && !match(cust) {
			continue
		}
		if sink != nil {
			for _, w := range ws.ids {
				(*sink)(MirrorPush{Watcher: w, Customer: ws.customer, Reset: true})
			}
		}
		delete(s.watchers, cust)
		s.watchedSet.Delete(cust)
	}
}

// watch runs watchReq: it registers the watcher and pushes it a snapshot.
func (s shard) watch(m *watchReq) {
	q := &m.q
	customer := bytesView(q.cust[:q.nCust])
	ws := s.watchers[customer]
	if ws == nil {
		if s.watchers == nil {
			s.watchers = make(map[string]*watchSet)
		}
		ws = &watchSet{customer: strings.Clone(customer)}
		s.watchers[ws.customer] = ws
		s.watchedSet.Store(ws.customer, struct{}{})
	}
	first := !slices.Contains(ws.ids, m.watcher)
	if first {
		if len(ws.ids) >= maxWatchers {
			s.log.Warn("devicehist: watch refused: the customer has too many watchers", "customer", ws.customer, "watchers", len(ws.ids))
			return
		}
		ws.ids = append(ws.ids, m.watcher)
		if sink := s.sink.Load(); sink != nil {
			(*sink)(MirrorPush{Watcher: m.watcher, Customer: ws.customer, Begins: true})
		}
		// The filter of a first watch only: a re-watch of the same
		// registration already has one, kept up to date by the feed.
		defer s.startFilter(ws, m.watcher)
	}
	var (
		recs  []MirrorRecord
		devs  []string
		addrs []netip.Addr
		err   error
	)
	device := func(id string) {
		if slices.Contains(devs, id) {
			return
		}
		devs = append(devs, id)
		e, lerr := s.device(customer, id, false)
		if lerr != nil {
			err = lerr
			return
		}
		_, held := s.devices.Get(deviceKey{customer, id})
		recs = s.parcel(recs, &e.rec, !held)
	}
	address := func(a netip.Addr) {
		if slices.Contains(addrs, a) {
			return
		}
		addrs = append(addrs, a)
		e, lerr := s.addressEntry(customer, a, false)
		if lerr != nil {
			err = lerr
			return
		}
		_, held := s.addresses.Get(addressKey{customer, a})
		recs = s.parcel(recs, &e.rec, !held)
	}
	if q.nDev > 0 {
		device(bytesView(q.dev[:q.nDev]))
	}
	if q.nAcct > 0 {
		e, lerr := s.account(customer, q.acct, false)
		if lerr != nil {
			err = lerr
		} else {
			_, held := s.accounts.Get(accountKey{customer, q.acct})
			recs = s.parcel(recs, &e.rec, !held)
			// Every device and address the account lists, trimmed or
			// not: a superset of what related reads at any later time.
			for _, d := range e.rec.Devices {
				device(d.ID)
			}
			for _, a := range e.rec.Addrs {
				address(a.Addr)
			}
		}
		if q.ip.IsValid() {
			address(q.ip)
		}
	}
	if err != nil {
		// No snapshot: the holder finds records missing and asks again.
		// The records in memory still go to a new registration (its only
		// chance: a re-watch is not a first).
		s.log.Warn("devicehist: watch snapshot not read", "err", err)
	} else if sink := s.sink.Load(); sink != nil && len(recs) > 0 {
		(*sink)(MirrorPush{Watcher: m.watcher, Customer: ws.customer, Records: recs})
	}
	if first {
		s.pushHot(ws, m.watcher)
	}
}

// pushHot sends watcher the customer's records in memory (maxHotRecords).
func (s shard) pushHot(ws *watchSet, watcher uint64) {
	sink := s.sink.Load()
	if sink == nil {
		return
	}
	type hot struct {
		r       storage.HistRecord
		touched int64
	}
	// The newest maxHotRecords, in at most twice that memory whatever the
	// customer's size: cut back to the newest each time it fills.
	var hs []hot
	newest := func() {
		slices.SortFunc(hs, func(a, b hot) int { return cmp.Compare(b.touched, a.touched) })
		hs = hs[:min(len(hs), maxHotRecords)]
	}
	s.rangeCustomer(ws.customer, func(r storage.HistRecord, touched int64) {
		if len(hs) == 2*maxHotRecords {
			newest()
		}
		hs = append(hs, hot{r, touched})
	})
	if len(hs) > maxHotRecords {
		newest()
	}
	var (
		recs []MirrorRecord
		size int
	)
	for i, h := range hs {
		n := len(recs)
		if recs = s.parcel(recs, h.r, false); len(recs) > n {
			size += len(recs[n].Parcel)
		}
		if len(recs) > 0 && (len(recs) == hotChunk || size >= hotChunkBytes || i == len(hs)-1) {
			(*sink)(MirrorPush{Watcher: watcher, Customer: ws.customer, Records: recs, Optional: true})
			recs, size = nil, 0
		}
	}
}

// pushEvent runs pushEventReq.
func (s shard) pushEvent(m *pushEventReq) {
	ws := s.watchers[m.customer]
	sink := s.sink.Load()
	if ws == nil || sink == nil {
		return
	}
	var recs []MirrorRecord
	if m.device != "" {
		e, err := s.device(m.customer, m.device, false)
		if err != nil {
			s.log.Warn("devicehist: a pushed event's device not read", "err", err)
			return
		}
		_, held := s.devices.Get(deviceKey{m.customer, m.device})
		recs = s.parcel(recs, &e.rec, !held)
	}
	for _, w := range ws.ids {
		if m.watcher == 0 || w == m.watcher {
			(*sink)(MirrorPush{Watcher: w, Customer: ws.customer, Records: recs, Event: m.event})
		}
	}
}

// unwatch runs unwatchReq.
func (s shard) unwatch(m *unwatchReq) {
	drop := func(cust string, ws *watchSet) {
		if i := slices.Index(ws.ids, m.watcher); i >= 0 {
			ws.ids = slices.Delete(ws.ids, i, i+1)
		}
		// Its filter under way is dropped when it comes back.
		ws.builds = slices.DeleteFunc(ws.builds, func(b *filterBuild) bool { return b.watcher == m.watcher })
		if len(ws.builds) == 0 {
			ws.pushed, ws.pushedLost = nil, false
		}
		if len(ws.ids) == 0 {
			delete(s.watchers, cust)
			s.watchedSet.Delete(cust)
		}
	}
	if !m.all {
		if ws := s.watchers[m.customer]; ws != nil {
			drop(m.customer, ws)
		}
		return
	}
	for cust, ws := range s.watchers {
		drop(cust, ws)
	}
}
