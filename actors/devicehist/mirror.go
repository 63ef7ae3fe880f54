package devicehist

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/storage"
)

// Mirroring (cluster mode). A lease holder charges an account from its
// slice of the allowance; its evaluations still need the customer's
// device history, which lives at the account's owner. Instead of one hop
// to the owner per evaluation, the owner streams the customer's changed
// records to each holder (a watch: one snapshot, then a change feed) and
// the holder answers an evaluation's facts over its copy (a mirror),
// storing nothing; the observation itself is forwarded to the owner, which
// records it as usual and streams the records it changed back.
//
// Both halves live in the shards, beside the records they copy: the owner's
// shard knows every change it makes, in its own order, and the holder's
// shard computes facts with the same step a Test observation runs on
// copies. A node that neither watches nor mirrors pays one map-length
// check per observation.
//
// Facts over the mirror equal the owner's as long as the owner's service
// clock moves forward: the holder trims copies where the owner trims in
// place, and the two agree whenever no record is trimmed at a later time
// than it is read.

// ErrNotMirrored is MirrorObserve's answer when the mirror lacks a record
// the observation needs: the caller asks the owner (Watch, and forwards the
// observation) instead.
var ErrNotMirrored = errors.New("devicehist: not mirrored")

// MirrorRecord is one record of a customer's history as the owner holds it.
type MirrorRecord struct {
	// Parcel is storage.AppendHistParcel of the record (identity and
	// value); for an absent record, of the empty record of its identity.
	Parcel []byte
	// Absent: the owner holds no such record.
	Absent bool
}

// MirrorPush is what the owner's shard tells one watcher of a customer. A
// push's Records may be shared by the pushes of several watchers: the sink
// must not modify them.
type MirrorPush struct {
	Watcher  uint64
	Customer string
	Records  []MirrorRecord
	// Reset: the owner no longer speaks for this customer's records (they
	// were taken out of this node, or the watcher was dropped): the holder
	// must drop its whole mirror of the customer.
	Reset bool
	// Event is what PushEvent was given (opaque here: the cluster's
	// encoding of a device event the owner stored), with Records holding
	// the event's device record.
	Event []byte
	// Filter is the owner's existence filter of the customer's records
	// (filter.go): sent once per watcher registration, with no Records. A
	// record the holder's mirror lacks and the filter surely lacks is one
	// the owner does not hold.
	Filter []byte
	// Optional: the watcher may go without it (the records in memory a
	// first watch is sent): a transport that is behind may drop it, and
	// the holder then asks for what it finds missing, as it would for a
	// record the owner did not hold in memory.
	Optional bool
	// Begins marks a registration's start: the watcher was not registered
	// for the customer before this watch (its first, or its first since
	// an unwatch or a reset). A bare marker, ahead of the registration's
	// snapshot, for the owner's transport, which sends a new registration
	// what it keeps of the customer besides its records (the recent
	// events); a holder given one changes nothing.
	Begins bool
}

// MirrorKeys names the records one evaluation needs: the same rules as
// Observation (the address only with an account and not a shared exit).
type MirrorKeys struct {
	DeviceID, AccountID string
	IP                  netip.Addr
	SharedExit          bool
}

// Messages of the mirror.
type (
	// mirrorApply is a push the holder applies to its mirror.
	mirrorApply struct{ p MirrorPush }
	// mirrorDrop drops a customer's mirror.
	mirrorDrop struct{ customer string }
	// mirrorReq is an observation answered over the mirror.
	mirrorReq  obsReq
	mirrorCall = actors.Call[mirrorReq, Facts]
)

// mirrored is one record as the mirror holds it; an absent record is held
// empty (it answers as the owner's missing record does). touched: the
// shard's time when it was last read or written (sweep).
type mirrored[R any] struct {
	rec     R
	touched int64
}

// mirrorSet is a holder's copy of one customer's records.
type mirrorSet struct {
	devices  map[string]*mirrored[storage.HistCustomerDevice]
	accounts map[storage.AccountHash]*mirrored[storage.HistAccount]
	addrs    map[netip.Addr]*mirrored[storage.HistAddress]
	// filter: the owner's existence filter (filter.go), with every
	// present record pushed since added; nil until one came.
	// filterTouched: when it last answered (sweep), as touched.
	filter        *existence
	filterTouched int64
}

func (m *mirrorSet) empty() bool {
	return len(m.devices) == 0 && len(m.accounts) == 0 && len(m.addrs) == 0
}

// mirrorView implements others over a customer's mirror: related reads
// trimmed copies, never the mirror itself.
type mirrorView struct {
	st  *shardState
	set *mirrorSet
	now int64
}

func (v *mirrorView) customerDevice(id string) *storage.HistCustomerDevice {
	m := v.set.devices[id]
	if m == nil {
		return nil
	}
	m.touched = v.now
	r := copyDevice(&v.st.relDevice, &m.rec)
	trimDevice(r, v.now)
	return r
}

func (v *mirrorView) address(a netip.Addr) *storage.HistAddress {
	m := v.set.addrs[a]
	if m == nil {
		return nil
	}
	m.touched = v.now
	r := copyAddress(&v.st.relAddress, &m.rec)
	trimAddress(r, v.now)
	return r
}

// MirrorApply applies one push to the mirror of its customer: a Reset drops
// the customer's whole mirror first, then each record replaces the
// mirror's copy (and a present one is added to the customer's filter), or
// the push's Filter becomes the customer's filter. A record that does not
// parse, or is not the push's customer's, and a filter that does not
// decode within its bounds, are dropped (logged). It returns at once.
func (c *Client) MirrorApply(p MirrorPush) {
	if c.stopped.Load() {
		return
	}
	if p.Customer == "" || len(p.Customer) > storage.MaxHistCustomer {
		c.log.Warn("devicehist: mirror push dropped: bad customer id", "len", len(p.Customer))
		return
	}
	c.shards.Send(actors.HashString(p.Customer), &mirrorApply{p: p})
}

// MirrorDrop drops the customer's mirror (the lease ended, the owner
// changed, the stream broke).
func (c *Client) MirrorDrop(customer string) {
	if c.stopped.Load() || customer == "" || len(customer) > storage.MaxHistCustomer {
		return
	}
	c.shards.Send(actors.HashString(customer), mirrorDrop{customer: customer})
}

// MirrorObserve answers the facts o would get if it were recorded on top of
// the customer's mirror, computed on copies as a Test observation is, and
// stores nothing anywhere. ErrNotMirrored (zero Facts) when the mirror
// lacks a record it needs: the device, the account, the counted address,
// or one the account lists. Nothing to observe answers zero Facts.
func (c *Client) MirrorObserve(o Observation) (Facts, error) {
	if o.DeviceID == "" && o.AccountID == "" {
		return Facts{}, nil
	}
	if c.stopped.Load() {
		return Facts{}, ErrStopped
	}
	call := c.mcalls.Get(mirrorReq{})
	if err := c.prepare(o, (*obsReq)(&call.Req)); err != nil {
		return Facts{}, err
	}
	c.shards.Send(actors.HashString(o.Customer), call)
	f, err := c.mcalls.Wait(call)
	if err != nil {
		return Facts{}, fmt.Errorf("devicehist: %w", err)
	}
	return f, nil
}

// SetMirror makes ObserveThen answer from the mirror (MirrorObserve)
// instead of recording the observation.
func (p *Prepared) SetMirror(on bool) { p.mirror = on }

// Holder side.

// applyMirror runs mirrorApply.
func (s shard) applyMirror(p *MirrorPush) {
	if p.Reset {
		delete(s.mirror, p.Customer)
	}
	if len(p.Filter) > 0 {
		s.applyFilter(p)
		return
	}
	if len(p.Records) == 0 {
		return
	}
	set := s.mirrorSetOf(p.Customer)
	for i := range p.Records {
		mr := &p.Records[i]
		r, err := storage.ParseHistParcel(mr.Parcel)
		if err != nil {
			s.log.Warn("devicehist: mirror record dropped", "customer", p.Customer, "err", err)
			continue
		}
		if c := storage.HistCustomerOf(r); c != p.Customer {
			s.log.Warn("devicehist: mirror record dropped: another customer's", "customer", p.Customer, "record_customer", c)
			continue
		}
		if mr.Absent {
			r = blankOf(r)
		} else if set.filter != nil {
			// The filter stays a superset of what the owner holds, so
			// that a record swept here never reads as absent.
			set.filter.add(filterKeyOf(s.fkey[:0], r))
		}
		switch r := r.(type) {
		case *storage.HistCustomerDevice:
			set.devices[r.Device] = &mirrored[storage.HistCustomerDevice]{rec: *r, touched: s.clock}
		case *storage.HistAccount:
			set.accounts[r.Hash] = &mirrored[storage.HistAccount]{rec: *r, touched: s.clock}
		case *storage.HistAddress:
			set.addrs[r.Addr] = &mirrored[storage.HistAddress]{rec: *r, touched: s.clock}
		}
	}
	if set.empty() && set.filter == nil {
		delete(s.mirror, p.Customer)
	}
}

// mirrorSetOf is the customer's mirror, made when there is none.
func (s shard) mirrorSetOf(customer string) *mirrorSet {
	set := s.mirror[customer]
	if set == nil {
		set = &mirrorSet{
			devices:  make(map[string]*mirrored[storage.HistCustomerDevice]),
			accounts: make(map[storage.AccountHash]*mirrored[storage.HistAccount]),
			addrs:    make(map[netip.Addr]*mirrored[storage.HistAddress]),
		}
		if s.mirror == nil {
			s.mirror = make(map[string]*mirrorSet)
		}
		s.mirror[strings.Clone(customer)] = set
	}
	return set
}

// mirrorObserve answers q's facts over the mirror, on copies. A record the
// mirror lacks is answered as new (empty) when the customer's filter says
// the owner surely holds none, and is ErrNotMirrored otherwise.
func (s shard) mirrorObserve(q *obsReq) (Facts, error) {
	if q.nDev == 0 && q.nAcct == 0 {
		return Facts{}, nil
	}
	customer := bytesView(q.cust[:q.nCust])
	set := s.mirror[customer]
	if set == nil {
		return Facts{}, ErrNotMirrored
	}
	s.clock = max(s.clock, q.now)
	var (
		cd *storage.HistCustomerDevice
		ac *storage.HistAccount
		ad *storage.HistAddress
	)
	if q.nDev > 0 {
		dev := bytesView(q.dev[:q.nDev])
		switch m := set.devices[dev]; {
		case m != nil:
			m.touched = q.now
			cd = copyDevice(&s.scratchDevice, &m.rec)
		case set.surelyAbsent(filterDeviceKey(s.fkey[:0], dev), q.now):
			// The scratch copies hold views of q's bytes only while
			// they are in use: the next use overwrites them.
			cd = copyDevice(&s.scratchDevice, &storage.HistCustomerDevice{Customer: customer, Device: dev})
		default:
			return Facts{}, ErrNotMirrored
		}
	}
	if q.nAcct > 0 {
		switch m := set.accounts[q.acct]; {
		case m != nil:
			m.touched = q.now
			ac = copyAccount(&s.scratchAccount, &m.rec)
		case set.surelyAbsent(filterAccountKey(s.fkey[:0], q.acct), q.now):
			ac = copyAccount(&s.scratchAccount, &storage.HistAccount{Customer: customer, Hash: q.acct})
		default:
			return Facts{}, ErrNotMirrored
		}
		if q.ip.IsValid() {
			switch m := set.addrs[q.ip]; {
			case m != nil:
				m.touched = q.now
				ad = copyAddress(&s.scratchAddress, &m.rec)
			case set.surelyAbsent(filterAddrKey(s.fkey[:0], q.ip), q.now):
				ad = copyAddress(&s.scratchAddress, &storage.HistAddress{Customer: customer, Addr: q.ip})
			default:
				return Facts{}, ErrNotMirrored
			}
		}
		// related reads every device and address the account lists
		// (step trims the account first; trimming twice changes nothing).
		// One the owner surely lacks counts nothing there, as here
		// (mirrorView answers nil).
		trimAccount(ac, q.now)
		for _, d := range ac.Devices {
			if (cd == nil || d.ID != cd.Device) && set.devices[d.ID] == nil && !set.surelyAbsent(filterDeviceKey(s.fkey[:0], d.ID), q.now) {
				return Facts{}, ErrNotMirrored
			}
		}
		for _, a := range ac.Addrs {
			if (ad == nil || a.Addr != ad.Addr) && set.addrs[a.Addr] == nil && !set.surelyAbsent(filterAddrKey(s.fkey[:0], a.Addr), q.now) {
				return Facts{}, ErrNotMirrored
			}
		}
	}
	s.mview = mirrorView{st: s.shardState, set: set, now: q.now}
	f := step(&stepIn{now: q.now, ev: q.ev, replayed: q.replayed, acct: q.acct}, cd, ac, ad, &s.mview, s.seen)
	s.mview.set = nil
	return f, nil
}

// sweepMirror forgets mirror entries idle for idleAfter (the holder seeds
// them again from the owner when it needs them). An entry written before
// the shard knew any time is stamped now.
func (s shard) sweepMirror(now int64) {
	s.clock = max(s.clock, now)
	for cust, set := range s.mirror {
		sweepMirrored(set.devices, now, s.idleAfter)
		sweepMirrored(set.accounts, now, s.idleAfter)
		sweepMirrored(set.addrs, now, s.idleAfter)
		// The filter goes with the last entry, unless it answered
		// within idleAfter (a customer seen only as new has no entry).
		if set.filter != nil && set.filterTouched == 0 {
			set.filterTouched = now
		}
		if set.empty() && (set.filter == nil || now-set.filterTouched > s.idleAfter) {
			delete(s.mirror, cust)
		}
	}
}

func sweepMirrored[K comparable, R any](m map[K]*mirrored[R], now, idleAfter int64) {
	for k, e := range m {
		switch {
		case e.touched == 0:
			e.touched = now
		case now-e.touched > idleAfter:
			delete(m, k)
		}
	}
}
