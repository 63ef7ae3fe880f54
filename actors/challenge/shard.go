package challenge

import (
	"crypto/cipher"
	"encoding/binary"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/intel/evidence"
	"github.com/fraudd/fraudd/storage"
)

type issued struct {
	event   string
	device  digest
	expires time.Time
}

// sample is one device's latest accepted feature vector.
type sample struct {
	visitor  string // shown as nearest_device
	features [evidence.Features]float32
	last     time.Time
}

type reading struct {
	h    digest
	seen time.Time
}

type profile struct {
	h    digest
	seen time.Time
}

// customer is everything one customer holds.
type customer struct {
	challenges map[string]issued
	issuedAt   []time.Time // issuance times within the last Window, oldest first
	samples    map[digest]*sample
	events     map[string]time.Time // events with an accepted sample → when
	readings   map[digest][]reading // account hash → computation readings
	profiles   map[digest][]profile // device hash → recent profiles
}

func newCustomer() *customer {
	return &customer{
		challenges: map[string]issued{},
		samples:    map[digest]*sample{},
		events:     map[string]time.Time{},
		readings:   map[digest][]reading{},
		profiles:   map[digest][]profile{},
	}
}

// prune drops everything past its time as of now.
func (c *customer) prune(now time.Time) {
	for k, ch := range c.challenges {
		if !now.Before(ch.expires) {
			delete(c.challenges, k)
		}
	}
	i := 0
	for i < len(c.issuedAt) && !now.Before(c.issuedAt[i].Add(Window)) {
		i++
	}
	c.issuedAt = c.issuedAt[i:]
	for k, s := range c.samples {
		if !now.Before(s.last.Add(Retention)) {
			delete(c.samples, k)
		}
	}
	for k, t := range c.events {
		if !now.Before(t.Add(EventMaxAge + TTL)) {
			delete(c.events, k)
		}
	}
	for k, rs := range c.readings {
		rs = slices.DeleteFunc(rs, func(r reading) bool { return !now.Before(r.seen.Add(Retention)) })
		if len(rs) == 0 {
			delete(c.readings, k)
		} else {
			c.readings[k] = rs
		}
	}
	for k, ps := range c.profiles {
		ps = slices.DeleteFunc(ps, func(p profile) bool { return !now.Before(p.seen.Add(BurstWindow)) })
		if len(ps) == 0 {
			delete(c.profiles, k)
		} else {
			c.profiles[k] = ps
		}
	}
}

func (c *customer) empty() bool {
	return len(c.challenges) == 0 && len(c.issuedAt) == 0 && len(c.samples) == 0 &&
		len(c.events) == 0 && len(c.readings) == 0 && len(c.profiles) == 0
}

type shardState struct {
	customers *actors.Table[string, *customer]
	key       []byte
	log       *slog.Logger
	store     Store
	aead      cipher.AEAD
	// purged: customers purged since start that have kept nothing since, so
	// a beta-off caller does not cost a durable delete per request.
	purged map[string]bool
	// index and mask place this shard among the shards (route); storePruned
	// is when it last pruned its customers' stored samples.
	index, mask uint64
	storePruned time.Time
}

type shard struct{ *shardState }

func (s shard) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *issueCall:
		m.Reply(s.issue(&m.Req))
	case *submitCall:
		m.Reply(s.submit(&m.Req), nil)
	case actors.Tick:
		s.customers.Sweep(func(id string, _ *customer) bool {
			c, err := s.get(id, m.Now, false)
			return err == nil && c != nil && c.empty()
		})
		s.pruneStore(m.Now)
	case *purgeCall:
		m.Reply(struct{}{}, s.purge(m.Req))
	case *countCall:
		var n Counts
		if c, ok := s.customers.Get(m.Req); ok {
			n = Counts{Challenges: len(c.challenges), Devices: len(c.samples), Accounts: len(c.readings)}
		}
		m.Reply(n, nil)
	}
}

// pruneStore deletes the stored samples past Retention of every customer of
// this shard, including those not resident (not seen since a restart), at
// most every storePruneEvery. It runs in the shard, so it never races a
// sample the shard stores.
func (s shard) pruneStore(now time.Time) {
	if s.store == nil || now.Before(s.storePruned.Add(storePruneEvery)) {
		return
	}
	mine := func(id string) bool { return route(id)&s.mask == s.index }
	if err := s.store.PruneGPUSamples(now.Add(-Retention), mine); err != nil {
		s.log.Warn("challenge: expired gpu samples not deleted", "err", err)
		return
	}
	s.storePruned = now
}

func (s shard) purge(id string) error {
	if _, ok := s.customers.Get(id); !ok && s.purged[id] {
		return nil
	}
	s.customers.Delete(id)
	if s.store != nil {
		if err := s.store.DeleteGPUSamples(id); err != nil {
			return err
		}
	}
	s.purged[id] = true
	return nil
}

// get returns the customer's state pruned as of now, creating it (and
// loading its stored samples) when create.
func (s shard) get(id string, now time.Time, create bool) (*customer, error) {
	c, ok := s.customers.Get(id)
	if !ok {
		if !create {
			return nil, nil
		}
		c = newCustomer()
		if s.store != nil {
			stored, err := s.store.LoadGPUSamples(s.aead, id, now.Add(-Retention))
			if err != nil {
				return nil, err
			}
			for i := range stored {
				st := &stored[i]
				c.samples[digest(st.Device)] = &sample{visitor: st.Visitor, features: st.Features, last: st.Last}
				if st.Event != "" {
					// One accepted sample per event, across a restart too
					// (prune lets it go once the event is too old anyway).
					c.events[st.Event] = st.Last
				}
			}
		}
		s.customers.Put(id, c)
		delete(s.purged, id)
	}
	for k, smp := range c.samples {
		if !now.Before(smp.last.Add(Retention)) && s.store != nil {
			if err := s.store.DeleteGPUSample(id, k); err != nil {
				s.log.Warn("challenge: expired gpu sample not deleted", "err", err)
			}
		}
	}
	c.prune(now)
	return c, nil
}

func (s shard) issue(m *Issue) (Issued, error) {
	c, err := s.get(m.Customer, m.Now, true)
	if err != nil {
		return Issued{}, err
	}
	if len(c.issuedAt) >= PerHour {
		return Issued{}, &RateLimited{RetryAfter: c.issuedAt[0].Add(Window).Sub(m.Now)}
	}
	if len(c.challenges) >= MaxOutstanding {
		return Issued{}, ErrOutstanding
	}
	ch := NewChallenge()
	exp := m.Now.Add(TTL)
	c.challenges[ch] = issued{event: m.Event, device: keyed(s.key, "device", []byte(m.Device)), expires: exp}
	c.issuedAt = append(c.issuedAt, m.Now)
	return Issued{Challenge: ch, Expires: exp}, nil
}

func (s shard) submit(m *Submit) Submitted {
	c, _ := s.get(m.Customer, m.Now, false)
	if c == nil {
		return Submitted{Status: StatusExpiredOrUsed}
	}
	dev := keyed(s.key, "device", []byte(m.Device))
	ch, ok := c.challenges[m.Challenge]
	if !ok || ch.event != m.Event || ch.device != dev {
		if m.Browser != nil {
			return Submitted{Status: StatusReplay}
		}
		return Submitted{Status: StatusExpiredOrUsed}
	}
	if !m.Peek {
		delete(c.challenges, m.Challenge) // one use
	}
	out := Submitted{Accepted: true}
	if m.Browser != nil {
		s.browser(c, m, dev, &out)
		return out
	}
	out.Status = StatusNotSaved
	if m.GPU == nil {
		return out
	}
	// Nearest among the customer's other devices: resemblance only.
	best := math.Inf(1)
	for k, smp := range c.samples {
		if k == dev {
			continue
		}
		if d := evidence.RMS(m.GPU, &smp.features); d < best {
			best, out.Nearest = d, smp.visitor
		}
	}
	if out.Nearest != "" {
		out.RMS, out.HasNearest = math.Round(best*1e6)/1e6, true
	}
	if _, done := c.events[m.Event]; done || m.Peek {
		return out // one accepted sample per verified event; a peek keeps none
	}
	smp, have := c.samples[dev]
	switch {
	case have && m.Now.Before(smp.last.Add(Cooldown)):
		return out
	case !have && len(c.samples) >= MaxDevices:
		return out
	}
	if s.store != nil {
		rec := storage.GPUSample{Customer: m.Customer, Device: dev, Visitor: m.Device, Last: m.Now, Features: *m.GPU, Event: m.Event}
		if err := s.store.PutGPUSample(s.aead, &rec); err != nil {
			s.log.Warn("challenge: gpu sample not stored", "err", err)
			return out
		}
	}
	if !have {
		smp = &sample{visitor: m.Device}
		c.samples[dev] = smp
	}
	smp.features, smp.last = *m.GPU, m.Now
	c.events[m.Event] = m.Now
	out.Status = StatusRecorded
	return out
}

// browser evaluates the two stateful findings. Only keyed hashes are kept.
func (s shard) browser(c *customer, m *Submit, dev digest, out *Submitted) {
	b := m.Browser
	// Profile: the claims, graphics and readings together.
	var buf []byte
	for _, cl := range append(b.Page[:], b.Worker[:]...) {
		buf = append(buf, cl.Browser...)
		buf = append(buf, '/')
		buf = append(buf, cl.OS...)
		buf = append(buf, ';')
	}
	buf = append(buf, b.WebGL+"/"+b.WebGPU...)
	if b.Fallback {
		buf = append(buf, '!')
	}
	reads := readingsBytes(b)
	p := keyed(s.key, "profile", buf, reads)
	ps := c.profiles[dev]
	if m.Peek {
		// The findings as if this report were kept, without keeping it.
		ps = slices.Clone(ps)
	}
	if i := slices.IndexFunc(ps, func(x profile) bool { return x.h == p }); i >= 0 {
		// Seen again: it counts toward a burst from its latest sighting,
		// not its first (prune drops it BurstWindow after seen).
		if m.Now.After(ps[i].seen) { // never back (cluster members' clocks)
			ps[i].seen = m.Now
		}
	} else {
		ps = append(ps, profile{h: p, seen: m.Now})
		if len(ps) > 4*BurstProfiles {
			ps = ps[1:]
		}
	}
	if !m.Peek {
		c.profiles[dev] = ps
	}
	out.ProfileBurst = len(ps) >= BurstProfiles
	if m.AccountID == "" || reads == nil {
		return
	}
	acct := keyed(s.key, "account", []byte(m.AccountID))
	r := keyed(s.key, "reading", reads)
	rs := c.readings[acct]
	for _, x := range rs {
		if x.h != r {
			out.Randomization = true
		}
	}
	if m.Peek {
		return
	}
	if !slices.ContainsFunc(rs, func(x reading) bool { return x.h == r }) {
		rs = append(rs, reading{h: r, seen: m.Now})
		if len(rs) > maxReadings {
			rs = rs[1:]
		}
	}
	c.readings[acct] = rs
}

// readingsBytes serialises the non-null computation readings; nil when none.
func readingsBytes(b *evidence.Browser) []byte {
	var out []byte
	for i, v := range b.Computations {
		if v == nil {
			continue
		}
		out = append(out, byte(i))
		for _, x := range v {
			out = binary.BigEndian.AppendUint32(out, x)
		}
	}
	return out
}
