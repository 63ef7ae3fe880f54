package devicehist

import (
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
)

// entry is one record in a shard's memory, with what the store holds of it
// (once the writes handed to the committer land). dirty: changed since the
// shard's last flush. wseq: the shard's write that last carried it. An entry
// is evicted only when it is clean and that write is stored, so a reload
// never reads an older copy.
type entry[R any] struct {
	rec     R
	stored  storage.HistStored
	touched int64
	dirty   bool
	wseq    uint64
}

type (
	deviceKey  struct{ customer, device string }
	accountKey struct {
		customer string
		hash     storage.AccountHash
	}
	addressKey struct {
		customer string
		addr     netip.Addr
	}
	deviceEntry  = entry[storage.HistCustomerDevice]
	accountEntry = entry[storage.HistAccount]
	addressEntry = entry[storage.HistAddress]
)

// Messages besides the calls.
type (
	// barrier is closed once every change the shard made before it is
	// stored (or failed), or hears ErrStopped when they cannot be (the
	// committer closed: refused). Make it with newBarrier.
	barrier chan error
	// flushReq asks a shard to hand what changed since its last flush to the
	// committer (Shards.FlushPending sends it).
	flushReq = actors.FlushReq
	// expire asks the owner to trim or delete a record the expiry index names.
	expire struct {
		ref storage.HistRef
		now int64
	}
	// lenProbe asks a shard how many entries it holds (tests).
	lenProbe chan int
)

// newBarrier makes a barrier; its room for one error lets the shard answer
// ErrStopped without waiting for a waiter that may have given up.
func newBarrier() barrier { return make(barrier, 1) }

// pending is one write on its way to the store (or a barrier).
type pending struct {
	w       *storage.HistWrite
	st      *shardState
	seq     uint64
	ack     flushReq
	barrier barrier
}

var writePool = sync.Pool{New: func() any { return new(storage.HistWrite) }}

// shardState outlives the actor value. With a store, a restart after a panic
// stores what changed and then drops the entries (see New); without one it
// keeps them, as the only copy.
type shardState struct {
	devices   *actors.Table[deviceKey, *deviceEntry]
	accounts  *actors.Table[accountKey, *accountEntry]
	addresses *actors.Table[addressKey, *addressEntry]
	store     Store
	commit    *actors.GroupCommitter[pending]
	sealer    *secrets.Sealer
	idleAfter int64
	log       *slog.Logger
	// bounds of the three tables (Config.MaxDevices, MaxAccounts,
	// MaxAddresses); zero without a store.
	maxDevices, maxAccounts, maxAddresses actors.Bound

	// Changed since the last flush (shard goroutine only).
	dirtyDevices   []*deviceEntry
	dirtyAccounts  []*accountEntry
	dirtyAddresses []*addressEntry
	// pending is set when the first entry turns dirty after a flush, so the
	// flush hook messages only shards with something to write.
	pending atomic.Bool
	seq     uint64 // writes handed to the committer (shard goroutine only)
	// marks: how far those writes went; entries last carried by a write
	// that did not reach the store are not evicted.
	marks actors.WriteMarks
	// stoppedLogged: the shard said once that it outlived Stop (refused).
	stoppedLogged bool

	// Scratch: test-key observations run on copies; related counts dedupe here.
	scratchDevice  storage.HistCustomerDevice
	scratchAccount storage.HistAccount
	scratchAddress storage.HistAddress
	seen           map[storage.AccountHash]struct{}
	customer       string // the customer of the observation in progress (others)
	now            int64

	// Cluster mirror (mirror.go); both nil on a single node. watchers: the
	// owner's watchers per customer; mirror: the holder's copies per
	// customer. sink is the client's (SetMirrorSink). clock: the latest
	// time the shard heard (ticks, mirror observations), which stamps the
	// mirror's writes for the sweep.
	watchers   map[string]*watchSet
	mirror     map[string]*mirrorSet
	sink       *atomic.Pointer[func(MirrorPush)]
	watchedSet *sync.Map // the client's: customers with watchers
	clock      int64
	relDevice  storage.HistCustomerDevice
	relAddress storage.HistAddress
	mview      mirrorView
	// builder runs the owner's filter builds (filter.go); fkey is scratch
	// for a filter key.
	builder *filterBuilder
	fkey    [1 + storage.MaxHistDevice]byte
}

func newShardState(store Store, commit *actors.GroupCommitter[pending], sealer *secrets.Sealer, idleAfter int64, log *slog.Logger, sink *atomic.Pointer[func(MirrorPush)]) *shardState {
	return &shardState{
		sink:      sink,
		devices:   actors.NewTable[deviceKey, *deviceEntry](64),
		accounts:  actors.NewTable[accountKey, *accountEntry](64),
		addresses: actors.NewTable[addressKey, *addressEntry](64),
		store:     store, commit: commit, sealer: sealer, idleAfter: idleAfter, log: log,
		seen: make(map[storage.AccountHash]struct{}),
	}
}

type shard struct{ *shardState }

func (s shard) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *obsCall:
		f, err := s.observe(&m.Req)
		m.Reply(f, err)
	case ObserveStep:
		if p := m.ObserveReq(); p.mirror {
			m.Observed(s.mirrorObserve(&p.q))
		} else {
			m.Observed(s.observe(&p.q))
		}
	case *mirrorCall:
		f, err := s.mirrorObserve((*obsReq)(&m.Req))
		m.Reply(f, err)
	case *devicesCall:
		m.Reply(s.list(&m.Req), nil)
	case barrier:
		if s.commit == nil {
			close(m)
			return
		}
		s.flush(nil)
		s.add(pending{barrier: m})
	case flushReq:
		s.flush(m)
	case *expire:
		s.expire(&m.ref, m.now)
	case *takeReq:
		s.take(m)
	case *mergeReq:
		s.merge(m)
	case actors.Tick:
		s.sweep(m.Now.Unix())
	case *watchReq:
		s.watch(m)
	case *pushEventReq:
		s.pushEvent(m)
	case *unwatchReq:
		s.unwatch(m)
	case filterReady:
		s.filterReady(m.b)
	case *mirrorApply:
		s.applyMirror(&m.p)
	case mirrorDrop:
		delete(s.mirror, m.customer)
	case lenProbe:
		m <- s.devices.Len() + s.accounts.Len() + s.addresses.Len()
	}
}

// bytesView returns a string over b without copying; it must not outlive
// the message b belongs to (entries copy it with strings.Clone).
func bytesView(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func (s shard) observe(q *obsReq) (Facts, error) {
	// Before any entry is taken: an observation holds its entries until it
	// marks them, and an entry evicted under it would be changed unseen.
	s.trim()
	customer := bytesView(q.cust[:q.nCust])
	s.customer, s.now = customer, q.now
	var (
		de  *deviceEntry
		ae  *accountEntry
		ade *addressEntry
		err error
	)
	if q.nDev > 0 {
		if de, err = s.device(customer, bytesView(q.dev[:q.nDev]), !q.test); err != nil {
			return Facts{}, err
		}
	}
	if q.nAcct > 0 {
		if ae, err = s.account(customer, q.acct, !q.test); err != nil {
			return Facts{}, err
		}
		if q.ip.IsValid() {
			if ade, err = s.addressEntry(customer, q.ip, !q.test); err != nil {
				return Facts{}, err
			}
		}
	}
	var (
		cd *storage.HistCustomerDevice
		ac *storage.HistAccount
		ad *storage.HistAddress
	)
	if q.test {
		if de != nil {
			cd = copyDevice(&s.scratchDevice, &de.rec)
		}
		if ae != nil {
			ac = copyAccount(&s.scratchAccount, &ae.rec)
		}
		if ade != nil {
			ad = copyAddress(&s.scratchAddress, &ade.rec)
		}
	} else {
		if de != nil {
			cd, de.touched = &de.rec, q.now
		}
		if ae != nil {
			ac, ae.touched = &ae.rec, q.now
		}
		if ade != nil {
			ad, ade.touched = &ade.rec, q.now
		}
	}
	f := step(&stepIn{now: q.now, ev: q.ev, replayed: q.replayed, acct: q.acct}, cd, ac, ad, s, s.seen)
	s.customer = ""
	if q.test {
		return f, nil
	}
	if ac != nil && len(ac.Sealed) == 0 {
		ac.Sealed = s.sealer.Seal(q.acctID[:q.nAcct])
	}
	s.mark(de, ae, ade)
	if len(s.watchers) > 0 {
		s.pushObserved(customer, de, ae, ade)
	}
	return f, nil
}

// customerDevice implements others: another device of the customer in
// progress, read (never created) and trimmed.
func (s shard) customerDevice(id string) *storage.HistCustomerDevice {
	e, err := s.device(s.customer, id, false)
	if err != nil {
		s.log.Warn("devicehist: related device not read", "err", err)
		return nil
	}
	trimDevice(&e.rec, s.now)
	return &e.rec
}

// address implements others.
func (s shard) address(a netip.Addr) *storage.HistAddress {
	e, err := s.addressEntry(s.customer, a, false)
	if err != nil {
		s.log.Warn("devicehist: related address not read", "err", err)
		return nil
	}
	trimAddress(&e.rec, s.now)
	return &e.rec
}

// device returns the (customer, device) entry, loading it on first touch.
// An entry that is neither stored nor created comes back empty and is not
// kept.
func (s shard) device(customer, device string, create bool) (*deviceEntry, error) {
	if e, ok := s.devices.Get(deviceKey{customer, device}); ok {
		return e, nil
	}
	e := &deviceEntry{rec: storage.HistCustomerDevice{Customer: strings.Clone(customer), Device: strings.Clone(device)}}
	found, err := s.load(&e.rec, &e.stored)
	if err != nil {
		return nil, err
	}
	if found || create {
		s.devices.Put(deviceKey{e.rec.Customer, e.rec.Device}, e)
	}
	return e, nil
}

func (s shard) account(customer string, h storage.AccountHash, create bool) (*accountEntry, error) {
	if e, ok := s.accounts.Get(accountKey{customer, h}); ok {
		return e, nil
	}
	e := &accountEntry{rec: storage.HistAccount{Customer: strings.Clone(customer), Hash: h}}
	found, err := s.load(&e.rec, &e.stored)
	if err != nil {
		return nil, err
	}
	if found || create {
		s.accounts.Put(accountKey{e.rec.Customer, h}, e)
	}
	return e, nil
}

func (s shard) addressEntry(customer string, a netip.Addr, create bool) (*addressEntry, error) {
	if e, ok := s.addresses.Get(addressKey{customer, a}); ok {
		return e, nil
	}
	e := &addressEntry{rec: storage.HistAddress{Customer: strings.Clone(customer), Addr: a}}
	found, err := s.load(&e.rec, &e.stored)
	if err != nil {
		return nil, err
	}
	if found || create {
		s.addresses.Put(addressKey{e.rec.Customer, a}, e)
	}
	return e, nil
}

func (s shard) load(r storage.HistRecord, st *storage.HistStored) (bool, error) {
	if s.store == nil {
		return false, nil
	}
	got, found, err := s.store.LoadHist(r)
	if err != nil {
		return false, fmtUnavailable(err)
	}
	*st = got
	return found, nil
}

// mark notes the changed records for the next flush: however often a
// record changes within an interval, it is written once.
func (s shard) mark(de *deviceEntry, ae *accountEntry, ade *addressEntry) {
	if s.commit == nil {
		return
	}
	if len(s.dirtyDevices) == 0 && len(s.dirtyAccounts) == 0 && len(s.dirtyAddresses) == 0 {
		s.pending.Store(true)
	}
	if de != nil && !de.dirty {
		de.dirty = true
		s.dirtyDevices = append(s.dirtyDevices, de)
	}
	if ae != nil && !ae.dirty {
		ae.dirty = true
		s.dirtyAccounts = append(s.dirtyAccounts, ae)
	}
	if ade != nil && !ade.dirty {
		ade.dirty = true
		s.dirtyAddresses = append(s.dirtyAddresses, ade)
	}
}

// flush encodes every record changed since the last flush into one write
// for the committer; ack (when not nil) hears once it is stored. It runs on
// the shard's goroutine, or on Stop's once the shard has stopped.
func (s shard) flush(ack flushReq) {
	s.pending.Store(false)
	if s.commit == nil || len(s.dirtyDevices) == 0 && len(s.dirtyAccounts) == 0 && len(s.dirtyAddresses) == 0 {
		if ack != nil {
			ack <- struct{}{}
		}
		return
	}
	s.seq++
	w := writePool.Get().(*storage.HistWrite)
	w.Reset()
	// What encode leaves dirty (its stored copy unreadable) stays listed
	// for the next flush.
	devs := s.dirtyDevices[:0]
	for _, e := range s.dirtyDevices {
		if !s.encode(w, &e.rec, &e.stored, &e.dirty, &e.wseq) {
			devs = append(devs, e)
		}
	}
	accts := s.dirtyAccounts[:0]
	for _, e := range s.dirtyAccounts {
		if !s.encode(w, &e.rec, &e.stored, &e.dirty, &e.wseq) {
			accts = append(accts, e)
		}
	}
	addrs := s.dirtyAddresses[:0]
	for _, e := range s.dirtyAddresses {
		if !s.encode(w, &e.rec, &e.stored, &e.dirty, &e.wseq) {
			addrs = append(addrs, e)
		}
	}
	clear(s.dirtyDevices[len(devs):])
	clear(s.dirtyAccounts[len(accts):])
	clear(s.dirtyAddresses[len(addrs):])
	s.dirtyDevices, s.dirtyAccounts, s.dirtyAddresses = devs, accts, addrs
	if len(devs) > 0 || len(accts) > 0 || len(addrs) > 0 {
		s.pending.Store(true)
	}
	s.add(pending{w: w, st: s.shardState, seq: s.seq, ack: ack})
}

// add hands p to the committer, or settles it as refused, and reports
// which.
func (s shard) add(p pending) bool {
	if s.commit.Add(p) {
		return true
	}
	s.refused(&p)
	return false
}

// outlived logs, once per shard, that it runs on after Stop closed the
// committer.
func (s shard) outlived() {
	if !s.stoppedLogged {
		s.stoppedLogged = true
		s.log.Error("devicehist: a shard outlived Stop; the history it changed since cannot be stored")
	}
}

// refused settles p, which the committer refused because Stop closed it
// while this shard was stuck in a handler (its stop timed out): nothing can
// be stored any more. A write is settled as a failed one is (the entries
// keep serving from memory; the observations still in the mailbox are
// answered from there, with what a crash would lose lost to the store), a
// flush's ack is answered and a barrier hears ErrStopped. Logged once per
// shard.
func (s shard) refused(p *pending) {
	s.outlived()
	p.settle(true, ErrStopped)
}

// settle ends p once its write went through or failed (failed): the
// shard's stored sequence moves on, past a failed write too, which then
// pins the entries it carried in memory (WriteMarks); the write's
// buffer goes back to the pool, a flush's ack is answered and a barrier is
// released, hearing err when the committer was gone.
func (p *pending) settle(failed bool, err error) {
	if p.st != nil {
		p.st.marks.Settle(p.seq, failed)
	}
	if p.w != nil {
		writePool.Put(p.w)
	}
	if p.ack != nil {
		p.ack <- struct{}{}
	}
	if p.barrier != nil {
		if err != nil {
			p.barrier <- err
		} else {
			close(p.barrier)
		}
	}
}

// encode adds one dirty record to w (one that expire dropped meanwhile is
// clean and skipped). It reports false, leaving the record dirty, when
// where cannot tell what the store holds of it.
func (s shard) encode(w *storage.HistWrite, r storage.HistRecord, st *storage.HistStored, dirty *bool, wseq *uint64) bool {
	if !*dirty {
		return true
	}
	if !s.where(r, st, *wseq) {
		return false
	}
	*dirty = false
	ns, err := w.Put(r, *st)
	if err != nil {
		s.log.Warn("devicehist: record not stored", "err", err)
		return true
	}
	*st, *wseq = ns, s.seq
	return true
}

// where makes st what the store holds of r before a write replaces or
// deletes it. st is what r's last write (wseq) leaves stored once it lands,
// set when it was encoded; when that write, or one after it, failed, the
// store may still hold the copy before it (a failed write leaves the store
// as it was), and a write built on st would delete keys that were never
// stored and leave the stored ones: a record first written by the failed
// write then lost its expiry-index entry for good (never pruned), a stored
// one kept its old recent-list entry forever. The store is read back then
// (rarely: only the entries written at or before a failure, once each).
// A write still on its way is taken to land. False: the store could not
// be read.
func (s shard) where(r storage.HistRecord, st *storage.HistStored, wseq uint64) bool {
	if wseq == 0 || wseq > s.marks.Failed() || wseq > s.marks.Stored() {
		return true
	}
	var blank storage.HistRecord
	switch r := r.(type) {
	case *storage.HistCustomerDevice:
		s.scratchDevice.Customer, s.scratchDevice.Device = r.Customer, r.Device
		blank = &s.scratchDevice
	case *storage.HistAccount:
		s.scratchAccount.Customer, s.scratchAccount.Hash = r.Customer, r.Hash
		blank = &s.scratchAccount
	case *storage.HistAddress:
		s.scratchAddress.Customer, s.scratchAddress.Addr = r.Customer, r.Addr
		blank = &s.scratchAddress
	default:
		return true
	}
	got, _, err := s.store.LoadHist(blank)
	if err != nil {
		s.log.Warn("devicehist: record not stored: its stored copy is unreadable", "err", err)
		return false
	}
	*st = got // zero when nothing is stored
	return true
}

// expire trims or deletes the record ref names, and drops ref's index entry
// when the record no longer lives under it.
func (s shard) expire(ref *storage.HistRef, now int64) {
	if s.commit == nil {
		return
	}
	w := writePool.Get().(*storage.HistWrite)
	w.Reset()
	p := pending{w: w}
	var (
		st    *storage.HistStored
		was   storage.HistStored
		keep  bool
		rec   storage.HistRecord
		dirty *bool
		wseq  *uint64
		drop  func()
	)
	switch ref.Kind {
	case storage.HistKindCustomerDevice:
		e, err := s.device(ref.Customer, ref.Device, false)
		if err != nil {
			s.expireUnread(ref, err)
			return
		}
		st, rec, dirty, wseq, keep = &e.stored, &e.rec, &e.dirty, &e.wseq, trimDevice(&e.rec, now)
		drop = func() { s.devices.Delete(deviceKey{ref.Customer, ref.Device}) }
	case storage.HistKindAccount:
		e, err := s.account(ref.Customer, ref.Hash, false)
		if err != nil {
			s.expireUnread(ref, err)
			return
		}
		st, rec, dirty, wseq, keep = &e.stored, &e.rec, &e.dirty, &e.wseq, trimAccount(&e.rec, now)
		drop = func() { s.accounts.Delete(accountKey{ref.Customer, ref.Hash}) }
	case storage.HistKindAddress:
		e, err := s.addressEntry(ref.Customer, ref.Addr, false)
		if err != nil {
			s.expireUnread(ref, err)
			return
		}
		st, rec, dirty, wseq, keep = &e.stored, &e.rec, &e.dirty, &e.wseq, trimAddress(&e.rec, now)
		drop = func() { s.addresses.Delete(addressKey{ref.Customer, ref.Addr}) }
	default:
		return
	}
	if !s.where(rec, st, *wseq) {
		return // the index entry stays: the next prune finds it again
	}
	was = *st
	s.seq++
	p.st, p.seq = s.shardState, s.seq
	// ref's entry is stale when the record lives under another day (or is
	// not stored): drop it first, so a rewrite below always wins.
	if !was.OK || was.Day != ref.Day {
		w.DropIndex(ref)
	}
	switch {
	case !keep:
		if was.OK {
			w.Delete(rec, was)
		}
		*st = storage.HistStored{}
		*dirty = false // a flush must not bring it back
		// An entry a write still on its way carries (a take's delete)
		// stays, empty, until that write is stored: a reload meanwhile
		// would read the copy about to go. The sweep evicts it then.
		if *wseq <= s.marks.Stored() {
			drop()
		}
	case was.OK:
		if ns, err := w.Put(rec, was); err == nil {
			*st, *wseq = ns, s.seq
		}
	}
	// Refused, the expiry is undone in the store only: this shard's
	// memory drops what expired all the same, and the next prune (of the
	// next process) finds the record again.
	s.add(p)
	if len(s.watchers) > 0 {
		s.push(ref.Customer, s.parcel(nil, rec, !keep))
	}
}

// expireUnread handles a record expire could not load: one whose stored
// value does not decode is deleted (storage.DropUndecodableHist) — it can
// be neither trimmed nor read, and what it holds past the window, a sealed
// account id included, must not outlive it — and said once, naming its key;
// the read path already answers without it, with a warning. A store that
// failed to read leaves the index entry for the next prune.
func (s shard) expireUnread(ref *storage.HistRef, err error) {
	if !errors.Is(err, storage.ErrHistUndecodable) {
		s.log.Warn("devicehist: expiry not applied", "err", err)
		return
	}
	w := writePool.Get().(*storage.HistWrite)
	w.Reset()
	dropped, derr := s.store.DropUndecodableHist(w, ref)
	if derr != nil || !dropped {
		writePool.Put(w)
		if derr != nil {
			s.log.Warn("devicehist: expiry not applied", "err", derr)
		}
		return
	}
	s.seq++
	if !s.add(pending{w: w, st: s.shardState, seq: s.seq}) {
		return // refused: the next prune (of the next process) finds it again
	}
	s.log.Error("devicehist: a device-history record past its retention does not decode; deleted with what it held",
		"key", ref.String(), "err", err)
	if len(s.watchers) > 0 {
		s.push(ref.Customer, s.parcel(nil, ref.Record(), true))
	}
}

// sweep trims every entry, forgets the empty ones and, with a store, the
// ones idle for idleAfter. Entries with changes not yet stored stay, and
// so do those whose last write failed: the store holds an older copy, or
// none, which a reload would read. wseq 0: loaded and never written since.
func (s shard) sweep(now int64) {
	if len(s.mirror) > 0 {
		s.sweepMirror(now)
	}
	clean := s.marks.InStore()
	idle := func(touched int64) bool { return s.store != nil && now-touched > s.idleAfter }
	s.devices.Sweep(func(_ deviceKey, e *deviceEntry) bool {
		return clean(e.dirty, e.wseq) && (!trimDevice(&e.rec, now) || idle(e.touched))
	})
	s.accounts.Sweep(func(_ accountKey, e *accountEntry) bool {
		return clean(e.dirty, e.wseq) && (!trimAccount(&e.rec, now) || idle(e.touched))
	})
	s.addresses.Sweep(func(_ addressKey, e *addressEntry) bool {
		return clean(e.dirty, e.wseq) && (!trimAddress(&e.rec, now) || idle(e.touched))
	})
	s.maxDevices.Reset(s.devices.Len())
	s.maxAccounts.Reset(s.accounts.Len())
	s.maxAddresses.Reset(s.addresses.Len())
}

// trim makes room when a table holds its bound: the entries the store
// holds as they are go, least recently used first, down to three quarters
// of the bound, as they would once idle (a later observation reloads them).
// IdleAfter alone bounds memory by the evaluation rate: an uncapped account
// checking distinct end-user accounts or devices would hold every one of
// them for half an hour. A changed entry, or one whose write failed, is the
// only copy and stays.
func (s shard) trim() {
	clean := s.marks.InStore()
	actors.TrimOver(s.devices, &s.maxDevices, func(e *deviceEntry) (int64, bool) { return e.touched, clean(e.dirty, e.wseq) })
	actors.TrimOver(s.accounts, &s.maxAccounts, func(e *accountEntry) (int64, bool) { return e.touched, clean(e.dirty, e.wseq) })
	actors.TrimOver(s.addresses, &s.maxAddresses, func(e *addressEntry) (int64, bool) { return e.touched, clean(e.dirty, e.wseq) })
}

// dropStored forgets every entry the store holds as it is (WriteMarks.InStore); the
// others, changed or last carried by a failed write, are the only copy.
func (s *shardState) dropStored() {
	in := s.marks.InStore()
	s.devices.Sweep(func(_ deviceKey, e *deviceEntry) bool { return in(e.dirty, e.wseq) })
	s.accounts.Sweep(func(_ accountKey, e *accountEntry) bool { return in(e.dirty, e.wseq) })
	s.addresses.Sweep(func(_ addressKey, e *addressEntry) bool { return in(e.dirty, e.wseq) })
}

// list is the admin device list from memory (no store: everything is here).
func (s shard) list(q *devicesReq) []DeviceView {
	var out []DeviceView
	s.devices.Range(func(k deviceKey, e *deviceEntry) bool {
		if k.customer == q.customer && trimDevice(&e.rec, q.now) {
			out = append(out, viewOf(&e.rec))
		}
		return true
	})
	slices.SortFunc(out, func(a, b DeviceView) int { return b.LastSeen.Compare(a.LastSeen) })
	if len(out) > q.limit {
		out = out[:q.limit]
	}
	return out
}

// newCommitter stores the shards' flushes (and expiry writes); the flushes
// of one interval usually arrive together and go out as one batch. Nobody
// waits but the flush hook and barriers. A failure is logged (the store then
// reports itself unavailable) and the entries keep serving from memory.
func newCommitter(store Store, cfg actors.GroupConfig, log *slog.Logger) *actors.GroupCommitter[pending] {
	var ws []*storage.HistWrite
	apply := func(ps []pending) error {
		ws = ws[:0]
		for i := range ps {
			if ps[i].w != nil {
				ws = append(ws, ps[i].w)
			}
		}
		err := store.WriteHist(ws)
		clear(ws)
		return err
	}
	done := func(ps []pending, err error) {
		if err != nil {
			log.Error("devicehist: history not stored", "writes", len(ps), "err", err)
		}
		for i := range ps {
			ps[i].settle(err != nil, nil)
		}
	}
	return actors.NewGroupCommitter(cfg, apply, done)
}
