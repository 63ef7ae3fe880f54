package devicehist

import (
	"net/netip"
	"slices"
	"time"

	"github.com/fraudd/fraudd/storage"
)

// Windows and bounds. Timestamps inside records are Unix seconds.
const (
	// WindowDays is customer_history.window_days (SPEC §8: 90 days).
	WindowDays = 90
	windowSec  = int64(storage.HistRetention / time.Second)
	daySec     = int64(24 * time.Hour / time.Second)

	// maxEvents is how many recent event ids a (customer, device) remembers
	// to count a resubmitted event once.
	maxEvents = 32
	// maxLinks bounds the accounts remembered per (customer, device) and per
	// (customer, address); counts saturate there (the oldest link makes room).
	maxLinks = 256
	// maxAccountDevices and maxAccountAddrs bound what one end-user account
	// remembers; beyond them the least recently seen is forgotten.
	maxAccountDevices = 64
	maxAccountAddrs   = 32
)

// High-activity thresholds (device.high_activity, SPEC 2.2 "identified
// unusually often"). A person rarely passes 20 checked actions (sign-ups,
// logins, checkouts) on one site in a day, and the collector rarely sees one
// browser 500 times a day over all sites; scripted traffic does both.
const (
	// HighActivityVisits24h: distinct verified events of the device on the
	// caller's account in the current UTC hour and the 23 before it.
	HighActivityVisits24h = 20
	// HighActivityDaily: the device's global sightings (actors/events'
	// times_seen, every collection over all customers) average at least this
	// many per day since its first sighting (a day at least), with at least
	// this many in total.
	HighActivityDaily = 500
)

// HighActivity is the device.high_activity rule: the caller's own view
// (visits24h, from Facts.Visits24h) or the device's global sightings from
// actors/events (timesSeen and firstSeen; zero when unknown). The global rule
// averages since the first sighting, so a long-quiet device that bursts is
// caught by the per-customer rule rather than by it.
func HighActivity(visits24h int, timesSeen int64, firstSeen, now time.Time) bool {
	if visits24h >= HighActivityVisits24h {
		return true
	}
	if timesSeen < HighActivityDaily || firstSeen.IsZero() {
		return false
	}
	days := int64(now.Sub(firstSeen)/(24*time.Hour)) + 1
	return timesSeen >= HighActivityDaily*max(days, 1)
}

// Facts is what one observation answers: the device block's
// customer_history, linked_accounts and multi_account, the per-customer half
// of high_activity, and the `account` object (SPEC 2.2).
type Facts struct {
	// Device: the observation had device evidence (a DeviceID); History,
	// Visits24h and LinkedAccounts are set only then.
	Device bool
	// History is device.customer_history: the device on the caller's
	// account, in the 90-day window, this observation included.
	History History
	// Visits24h is History's visits in the current UTC hour and the 23
	// before it (the per-customer half of HighActivity).
	Visits24h int
	// Repeated: the event id was already counted; nothing was added.
	Repeated bool
	// LinkedAccounts is device.linked_accounts (and customer_history
	// accounts): distinct end-user accounts seen with this device on the
	// caller's account in the last 90 days. The wire shows it only when an
	// accountId was sent; multi_account is LinkedAccounts > 1.
	LinkedAccounts int

	// Account: an accountId was sent; the fields below are set only then.
	Account bool
	// DeviceAccounts24h: accounts on this device in 24 h, this one included
	// (null on the wire without device evidence).
	DeviceAccounts24h int
	// AccountDevices24h: devices this account was checked on in 24 h.
	AccountDevices24h int
	// IPAccounts24h: accounts from this address in 24 h; meaningful only when
	// IPCounted (false on a shared exit or an unmeasured address: null).
	IPAccounts24h int
	IPCounted     bool
	// NewDevice: the account was seen on another device and never this one
	// (null on the wire without device evidence).
	NewDevice bool
	// RelatedAccounts90d: the caller's other accounts that shared a device or
	// an address with this one within 90 days.
	RelatedAccounts90d int
}

// History is device.customer_history (window_days is WindowDays).
type History struct {
	Visits    int
	FirstSeen time.Time // first visit still in the window
	LastSeen  time.Time
	Accounts  int
}

// Returning is customer_history.returning.
func (h History) Returning() bool { return h.Visits > 1 }

// DeviceView is one line of the admin device list.
type DeviceView struct {
	VisitorID      string
	FirstSeen      time.Time
	LastSeen       time.Time
	Visits         int
	LinkedAccounts int
}

// stepIn is one observation as the state logic sees it.
type stepIn struct {
	now      int64
	ev       uint64 // event id hash; 0 when none was sent
	replayed bool   // the event was used before (Observation.Replayed)
	acct     storage.AccountHash
}

// others finds the records of this customer's other devices and addresses
// (already trimmed), for the related-accounts count; nil when unknown.
type others interface {
	customerDevice(id string) *storage.HistCustomerDevice
	address(a netip.Addr) *storage.HistAddress
}

// step applies one observation to the records it touches and returns its
// facts. cd (the device), ac (the account) and ad (the address, nil on a
// shared exit or without one) may each be nil. seen is scratch space.
func step(q *stepIn, cd *storage.HistCustomerDevice, ac *storage.HistAccount, ad *storage.HistAddress,
	o others, seen map[storage.AccountHash]struct{}) Facts {
	var f Facts
	now := q.now
	if cd != nil {
		trimDevice(cd, now)
		f.Device = true
		f.Repeated = q.ev != 0 && (q.replayed || slices.Contains(cd.Events, q.ev))
		if !f.Repeated {
			visit(cd, now, q.ev)
		}
	}
	if ac != nil {
		trimAccount(ac, now)
		f.Account = true
		if cd != nil {
			f.NewDevice = len(ac.Devices) > 0 && !slices.ContainsFunc(ac.Devices, func(d storage.SeenDevice) bool { return d.ID == cd.Device })
		}
		if ac.FirstCheck == 0 {
			ac.FirstCheck = now
		}
		ac.LastCheck = max(ac.LastCheck, now)
		if cd != nil {
			cd.Accounts = linkAccount(cd.Accounts, ac.Hash, now)
			ac.Devices = seeDevice(ac.Devices, cd.Device, now)
			f.DeviceAccounts24h = countAccounts24h(cd.Accounts, now)
		}
		if ad != nil {
			trimAddress(ad, now)
			ad.Accounts = linkAccount(ad.Accounts, ac.Hash, now)
			ac.Addrs = seeAddr(ac.Addrs, ad.Addr, now)
			f.IPCounted = true
			f.IPAccounts24h = countAccounts24h(ad.Accounts, now)
		}
		for _, d := range ac.Devices {
			if now-d.Last < daySec {
				f.AccountDevices24h++
			}
		}
		f.RelatedAccounts90d = related(ac, cd, ad, o, seen)
	}
	if cd != nil {
		f.History = history(cd)
		for _, h := range cd.Hours {
			f.Visits24h += int(h.N)
		}
		f.LinkedAccounts = len(cd.Accounts)
	}
	return f
}

// related counts the accounts other than ac that were seen with one of ac's
// devices or addresses; cd and ad are this observation's own records.
func related(ac *storage.HistAccount, cd *storage.HistCustomerDevice, ad *storage.HistAddress, o others, seen map[storage.AccountHash]struct{}) int {
	clear(seen)
	add := func(links []storage.SeenAccount) {
		for _, l := range links {
			if l.Hash != ac.Hash {
				seen[l.Hash] = struct{}{}
			}
		}
	}
	for _, d := range ac.Devices {
		r := cd
		if r == nil || r.Device != d.ID {
			if r = o.customerDevice(d.ID); r == nil {
				continue
			}
		}
		add(r.Accounts)
	}
	for _, a := range ac.Addrs {
		r := ad
		if r == nil || r.Addr != a.Addr {
			if r = o.address(a.Addr); r == nil {
				continue
			}
		}
		add(r.Accounts)
	}
	return len(seen)
}

func history(cd *storage.HistCustomerDevice) History {
	h := History{LastSeen: unix(cd.LastSeen), Accounts: len(cd.Accounts)}
	for _, d := range cd.Days {
		h.Visits += int(d.N)
	}
	if len(cd.Days) > 0 {
		h.FirstSeen = unix(cd.Days[0].First)
	}
	return h
}

func unix(s int64) time.Time {
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(s, 0).UTC()
}

// viewOf is the admin line of a (trimmed) device record.
func viewOf(cd *storage.HistCustomerDevice) DeviceView {
	h := history(cd)
	return DeviceView{VisitorID: cd.Device, FirstSeen: h.FirstSeen, LastSeen: h.LastSeen, Visits: h.Visits, LinkedAccounts: h.Accounts}
}

// visit counts one new event.
func visit(cd *storage.HistCustomerDevice, now int64, ev uint64) {
	if ev != 0 {
		if len(cd.Events) >= maxEvents {
			cd.Events = append(cd.Events[:0], cd.Events[len(cd.Events)-maxEvents+1:]...)
		}
		cd.Events = append(cd.Events, ev)
	}
	// A clock set backwards counts into the newest bucket, keeping both
	// lists ordered.
	day := storage.Day(now / daySec)
	if n := len(cd.Days); n > 0 && cd.Days[n-1].Day >= day {
		cd.Days[n-1].N++
	} else {
		cd.Days = append(cd.Days, storage.DayVisits{Day: day, N: 1, First: now})
	}
	hour := uint32(now / 3600)
	if n := len(cd.Hours); n > 0 && cd.Hours[n-1].Hour >= hour {
		cd.Hours[n-1].N++
	} else {
		cd.Hours = append(cd.Hours, storage.HourCount{Hour: hour, N: 1})
	}
	cd.LastSeen = max(cd.LastSeen, now)
}

// windowStart is the first UTC day still inside the 90-day window: a day
// bucket stays while any part of it is within 90 days of now. The store's
// expiry index uses the same rule (storage.ExpiredHist).
func windowStart(now int64) storage.Day {
	return storage.Day(max(now-windowSec, 0) / daySec)
}

// trimDevice drops what fell out of the windows and reports whether the
// record still holds a visit. A record without visits is empty (its links
// go with it).
func trimDevice(cd *storage.HistCustomerDevice, now int64) bool {
	start := windowStart(now)
	i := 0
	for i < len(cd.Days) && cd.Days[i].Day < start {
		i++
	}
	if i == len(cd.Days) {
		cd.Days, cd.Hours, cd.Events, cd.Accounts = cd.Days[:0], cd.Hours[:0], cd.Events[:0], cd.Accounts[:0]
		cd.LastSeen = 0
		return false
	}
	cd.Days = dropFront(cd.Days, i)
	hour := uint32(now / 3600)
	j := 0
	for j < len(cd.Hours) && cd.Hours[j].Hour+24 <= hour {
		j++
	}
	cd.Hours = dropFront(cd.Hours, j)
	cd.Accounts = trimLinks(cd.Accounts, now)
	return true
}

// trimAccount drops links older than the window; an account not checked for
// 90 days is empty, its sealed id included.
func trimAccount(ac *storage.HistAccount, now int64) bool {
	if ac.LastCheck == 0 || now-ac.LastCheck >= windowSec {
		ac.Sealed, ac.FirstCheck, ac.LastCheck = nil, 0, 0
		ac.Devices, ac.Addrs = ac.Devices[:0], ac.Addrs[:0]
		return false
	}
	ac.Devices = slices.DeleteFunc(ac.Devices, func(d storage.SeenDevice) bool { return now-d.Last >= windowSec })
	ac.Addrs = slices.DeleteFunc(ac.Addrs, func(a storage.SeenAddr) bool { return now-a.Last >= windowSec })
	return true
}

func trimAddress(ad *storage.HistAddress, now int64) bool {
	ad.Accounts = trimLinks(ad.Accounts, now)
	return len(ad.Accounts) > 0
}

func trimLinks(ls []storage.SeenAccount, now int64) []storage.SeenAccount {
	return slices.DeleteFunc(ls, func(l storage.SeenAccount) bool { return now-l.Last >= windowSec })
}

func dropFront[T any](s []T, n int) []T {
	if n == 0 {
		return s
	}
	return append(s[:0], s[n:]...)
}

func countAccounts24h(ls []storage.SeenAccount, now int64) int {
	n := 0
	for _, l := range ls {
		if now-l.Last < daySec {
			n++
		}
	}
	return n
}

// linkAccount records that h was seen now; a full list forgets its least
// recently seen entry.
func linkAccount(ls []storage.SeenAccount, h storage.AccountHash, now int64) []storage.SeenAccount {
	oldest := -1
	for i := range ls {
		if ls[i].Hash == h {
			ls[i].Last = max(ls[i].Last, now)
			return ls
		}
		if oldest < 0 || ls[i].Last < ls[oldest].Last {
			oldest = i
		}
	}
	if len(ls) < maxLinks {
		return append(ls, storage.SeenAccount{Hash: h, Last: now})
	}
	ls[oldest] = storage.SeenAccount{Hash: h, Last: now}
	return ls
}

func seeDevice(ds []storage.SeenDevice, id string, now int64) []storage.SeenDevice {
	oldest := -1
	for i := range ds {
		if ds[i].ID == id {
			ds[i].Last = max(ds[i].Last, now)
			return ds
		}
		if oldest < 0 || ds[i].Last < ds[oldest].Last {
			oldest = i
		}
	}
	if len(ds) < maxAccountDevices {
		return append(ds, storage.SeenDevice{ID: id, Last: now})
	}
	ds[oldest] = storage.SeenDevice{ID: id, Last: now}
	return ds
}

func seeAddr(as []storage.SeenAddr, a netip.Addr, now int64) []storage.SeenAddr {
	oldest := -1
	for i := range as {
		if as[i].Addr == a {
			as[i].Last = max(as[i].Last, now)
			return as
		}
		if oldest < 0 || as[i].Last < as[oldest].Last {
			oldest = i
		}
	}
	if len(as) < maxAccountAddrs {
		return append(as, storage.SeenAddr{Addr: a, Last: now})
	}
	as[oldest] = storage.SeenAddr{Addr: a, Last: now}
	return as
}

// Copies into reusable scratch records (test-key observations run on copies
// and are never stored).

func copyDevice(dst, src *storage.HistCustomerDevice) *storage.HistCustomerDevice {
	*dst = storage.HistCustomerDevice{
		Customer: src.Customer, Device: src.Device, LastSeen: src.LastSeen,
		Days:     append(dst.Days[:0], src.Days...),
		Hours:    append(dst.Hours[:0], src.Hours...),
		Events:   append(dst.Events[:0], src.Events...),
		Accounts: append(dst.Accounts[:0], src.Accounts...),
	}
	return dst
}

func copyAccount(dst, src *storage.HistAccount) *storage.HistAccount {
	*dst = storage.HistAccount{
		Customer: src.Customer, Hash: src.Hash, Sealed: src.Sealed, FirstCheck: src.FirstCheck, LastCheck: src.LastCheck,
		Devices: append(dst.Devices[:0], src.Devices...),
		Addrs:   append(dst.Addrs[:0], src.Addrs...),
	}
	return dst
}

func copyAddress(dst, src *storage.HistAddress) *storage.HistAddress {
	*dst = storage.HistAddress{Customer: src.Customer, Addr: src.Addr, Accounts: append(dst.Accounts[:0], src.Accounts...)}
	return dst
}
