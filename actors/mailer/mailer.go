// Package mailer owns the outbox: every email the service sends (usage
// warnings, webhook failure notices) is recorded in storage by one actor and,
// when an SMTP URL is configured, then sent over SMTP by one sender
// goroutine, whose outcome the actor records. Callers never wait for either,
// and a slow SMTP server never keeps a message out of the outbox.
//
// The outbox records every mail (ADMIN.md, README), also across a store
// failure: a record the store refuses (a full disk, say) is kept in memory,
// its latest version only, and written again before the next one, at every
// retry tick (RetryEvery) and at Stop, until the store takes it. At most
// maxUnstored are kept; past that the oldest is dropped, and the drops are
// counted in the log. A stop while the store is still down loses the kept
// records, with one ERROR line that counts them.
package mailer

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/smtp"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
)

// Outbox records are kept this long.
const retention = 90 * 24 * time.Hour

// maxUnstored bounds the records kept in memory while the store refuses
// them (a few KB each).
const maxUnstored = 1024

// Mail is one outbox record, as Recent lists it (the admin list names it
// without importing the store).
type Mail = storage.Mail

// Config configures New.
type Config struct {
	DB       *storage.DB
	Accounts *accounts.Service
	// SMTPURL is smtp://[user:pass@]host:port[?from=addr&starttls=false];
	// empty records into the outbox only.
	SMTPURL string
	Clock   clock.Clock
	Logger  *slog.Logger
	// Timeout bounds one SMTP conversation; 0 means 20 s.
	Timeout time.Duration
	// RetryEvery is how often records the store refused are written again;
	// 0 means 1 s.
	RetryEvery time.Duration
}

// Message is one email to queue.
type Message struct {
	Account string
	Kind    string
	Subject string
	Body    string

	// warning is the usage warning the message says, when it is one: see
	// sentBefore.
	warning *quota.Warning
}

// Mailer is the typed client of the mail actor.
type Mailer struct {
	cfg   Config
	smtp  *smtpTarget
	actor *actors.Shards // one shard; it keeps nothing between messages

	// sendq holds recorded messages for the sender, in order; quit ends it.
	sendq chan *storage.Mail
	quit  chan struct{}
	// mu is held by the sender while it hands an outcome to the actor;
	// stopped, set under it at Stop, ends it.
	mu      sync.Mutex
	stopped bool

	// The actor's alone (the caller's once Stop saw it stop): the records
	// the store refused, the latest version of each, oldest first; how
	// many were dropped past maxUnstored and how many were stored late
	// since the store last refused one; whether that refusal was logged.
	unstored    []*storage.Mail
	maxUnstored int
	lost        int
	late        int
	refusedLog  bool
}

// sendQueue bounds the messages waiting for SMTP; past it a message is
// recorded as failed rather than held.
const sendQueue = 1024

type smtpTarget struct {
	addr     string
	host     string
	from     string
	user     string
	pass     string
	starttls bool
}

// ParseSMTPURL reads smtp://[user:pass@]host:port[?from=…&starttls=false].
func ParseSMTPURL(raw string) (*smtpTarget, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "smtp" || u.Host == "" {
		return nil, fmt.Errorf("smtp url %q: want smtp://[user:pass@]host:port[?from=addr]", redactUserinfo(raw))
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, port = u.Host, "25"
	}
	// A host and a port that can be dialled, checked now: "smtp://:25",
	// "smtp://mail:" or "smtp://mail:99999" started the service, and every
	// mail then failed into the outbox, the operator none the wiser.
	if n, perr := strconv.Atoi(port); host == "" || perr != nil || n < 1 || n > 65535 {
		return nil, fmt.Errorf("smtp url %q: want a host and a port from 1 to 65535, smtp://[user:pass@]host:port[?from=addr]", redactUserinfo(raw))
	}
	t := &smtpTarget{addr: net.JoinHostPort(host, port), host: host, from: u.Query().Get("from"), starttls: u.Query().Get("starttls") != "false"}
	if t.from == "" {
		t.from = "fraudd@" + host
	}
	if u.User != nil {
		t.user = u.User.Username()
		t.pass, _ = u.User.Password()
	}
	return t, nil
}

// redactUserinfo is raw with any user:pass replaced, for an error message
// (which reaches the log): the password of a URL that does not parse is
// as secret as one that does.
func redactUserinfo(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		return u.Redacted()
	}
	// Unparsed, or parsed with the userinfo read as something else (in
	// "#://u:pass@host" it is the fragment): cut up to the last @.
	at := strings.LastIndexByte(raw, '@')
	if at < 0 {
		return raw
	}
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 && i < at {
		start = i + len("://")
	}
	return raw[:start] + "xxxxx" + raw[at:]
}

// New spawns the mail actor.
func New(root *actor.RootContext, cfg Config) (*Mailer, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 20 * time.Second
	}
	if cfg.RetryEvery <= 0 {
		cfg.RetryEvery = time.Second
	}
	m := &Mailer{cfg: cfg, maxUnstored: maxUnstored}
	if cfg.SMTPURL != "" {
		t, err := ParseSMTPURL(cfg.SMTPURL)
		if err != nil {
			return nil, err
		}
		m.smtp = t
		m.sendq, m.quit = make(chan *storage.Mail, sendQueue), make(chan struct{})
		go m.sender()
	}
	m.actor = actors.SpawnShards(root, 1, func(int) actor.Actor { return actor.ReceiveFunc(m.receive) },
		actors.Named("mailer"), actors.WithLogger(cfg.Logger))
	m.actor.Tick(cfg.Clock, cfg.RetryEvery)
	return m, nil
}

// Send queues a message; it returns at once.
func (m *Mailer) Send(msg Message) { m.actor.Send(0, &msg) }

// Warn implements quota.Notifier: it turns a usage threshold into an email.
func (m *Mailer) Warn(w quota.Warning) {
	m.Send(Message{Account: w.Account, Kind: "usage_" + w.Kind.String(), Subject: warnSubject(w), Body: warnBody(w), warning: &w})
}

// Recent lists the outbox, newest first.
func (m *Mailer) Recent(limit int) ([]*storage.Mail, error) { return m.cfg.DB.RecentMail(limit) }

// RecentOf lists one account's mail, newest first.
func (m *Mailer) RecentOf(account string, limit int) ([]*storage.Mail, error) {
	return m.cfg.DB.RecentMailOf(account, limit)
}

// Stop ends the actor after the messages already queued, and the sender:
// a message it has not sent stays in the outbox as recorded. Records the
// store refused are written a last time; those it refuses still are lost,
// and logged.
func (m *Mailer) Stop() { _ = m.StopBy(time.Time{}) }

// StopBy is Stop waiting for the actor only until by (actors.StopWait).
func (m *Mailer) StopBy(by time.Time) error {
	err := m.actor.StopBy(by)
	m.stopSender()
	if m.actor.Stopped(0) { // else its state is still the stuck actor's
		m.retry()
		if n := len(m.unstored); n > 0 {
			m.cfg.Logger.Error("mail outbox: records lost: the store was still unavailable at stop", "records", n)
			m.unstored = nil
		}
	}
	return err
}

func (m *Mailer) stopSender() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	m.stopped = true
	if m.quit != nil {
		close(m.quit)
	}
}

// sender sends the recorded messages over SMTP in order and records each
// outcome under the message's own key.
func (m *Mailer) sender() {
	for {
		var rec *storage.Mail
		select {
		case rec = <-m.sendq:
		case <-m.quit:
			return
		}
		err := m.deliver(rec)
		m.mu.Lock()
		if m.stopped {
			m.mu.Unlock()
			return
		}
		if err != nil {
			rec.Status, rec.Error = "failed", err.Error()
			m.cfg.Logger.Warn("mail not sent", "kind", rec.Kind, "account", rec.Account, "err", withoutAddresses(rec.Error))
		} else {
			rec.Status = "sent"
		}
		// The actor records it (rec is the actor's from here on), so that
		// a version it keeps for a retry never lands after this one.
		m.actor.Send(0, outcome{rec})
		m.mu.Unlock()
	}
}

// outcome is a sent (or failed) message's record, from the sender.
type outcome struct{ rec *storage.Mail }

func (m *Mailer) receive(c actor.Context) {
	switch msg := c.Message().(type) {
	case *Message:
		m.queue(msg)
	case outcome:
		m.record(msg.rec)
	case actors.Tick:
		m.retry()
	}
}

// record writes rec to the outbox, after the records kept for a retry; a
// record the store refuses is kept (a copy: the sender may own rec).
func (m *Mailer) record(rec *storage.Mail) {
	if m.retry(); len(m.unstored) > 0 {
		m.keep(rec) // the store still refuses
		return
	}
	if err := m.cfg.DB.PutMail(rec); err != nil {
		m.refused(err)
		m.keep(rec)
	}
}

// refused logs the first record the store refused since it last took one.
func (m *Mailer) refused(err error) {
	if !m.refusedLog {
		m.refusedLog = true
		m.cfg.Logger.Error("mail outbox: record not stored; kept in memory and written again once the store takes it",
			"kept_at_most", m.maxUnstored, "err", err)
	}
}

// keep adds a copy of rec to the records to write again, replacing an
// older version of it; past maxUnstored the oldest is dropped.
func (m *Mailer) keep(rec *storage.Mail) {
	cp := *rec
	for i, u := range m.unstored {
		if u.ID == cp.ID {
			m.unstored[i] = &cp
			return
		}
	}
	if len(m.unstored) >= m.maxUnstored {
		m.unstored[0] = nil
		m.unstored = m.unstored[1:]
		if m.lost++; m.lost == 1 {
			m.cfg.Logger.Error("mail outbox: records dropped: too many wait for the store", "kept", m.maxUnstored)
		}
	}
	m.unstored = append(m.unstored, &cp)
}

// retry writes the kept records, oldest first, until the store refuses one.
func (m *Mailer) retry() {
	if len(m.unstored) == 0 {
		return
	}
	for len(m.unstored) > 0 {
		if err := m.cfg.DB.PutMail(m.unstored[0]); err != nil {
			m.refused(err)
			return
		}
		m.unstored[0] = nil
		m.unstored = m.unstored[1:]
		m.late++
	}
	m.unstored = nil
	m.cfg.Logger.Info("mail outbox: records kept while the store was unavailable are stored", "records", m.late, "dropped", m.lost)
	m.late, m.lost, m.refusedLog = 0, 0, false
}

// queue records a new message in the outbox and hands it to the sender.
func (m *Mailer) queue(msg *Message) {
	if msg.warning != nil && m.sentBefore(msg) {
		m.cfg.Logger.Debug("usage warning already in the outbox for this period; not sent again", "kind", msg.Kind, "account", msg.Account)
		return
	}
	now := m.cfg.Clock.Now()
	rec := &storage.Mail{ID: secrets.RandomHex(8), At: now, Account: msg.Account, Kind: msg.Kind,
		Subject: msg.Subject, Body: msg.Body, Status: "recorded"}
	if v := m.cfg.Accounts.Get(msg.Account); v != nil {
		rec.To = v.Email
	}
	// Recorded before SMTP is tried; the sender records the outcome under
	// the same key. A server that holds each connection for its whole
	// timeout, or a stop meanwhile, never keeps a message out of the outbox
	// (ADMIN.md: the outbox always records).
	m.record(rec)
	if m.smtp != nil && rec.To != "" {
		select {
		case m.sendq <- rec: // the sender's from here on
		default:
			rec.Status, rec.Error = "failed", fmt.Sprintf("not sent: %d messages already wait for the SMTP server", sendQueue)
			m.cfg.Logger.Warn("mail not sent", "kind", rec.Kind, "account", rec.Account, "err", withoutAddresses(rec.Error))
			m.record(rec)
		}
	}
	if err := m.cfg.DB.PruneMail(now.Add(-retention)); err != nil {
		m.cfg.Logger.Warn("mail outbox: records past retention not pruned", "err", err)
	}
}

// sentBefore reports whether the outbox already holds the usage warning msg
// says for the same period: the same threshold reached within the 24 hours
// before it (hourly, as quota.warnHourly spaces them) or in the same UTC
// month for the same allowance (monthly; one raised since re-arms it, as
// quota.warnMonthly does). The quota actors mark a warning as sent in the
// charge's delta, which interval durability writes behind (README
// Durability), while the outbox record is synced at once: a crash before
// the group sync kept the mail but lost the mark, and the same threshold
// reached again after the restart mailed it twice. This look back runs
// here, on the mail actor, only when a threshold is reached, so counted
// calls pay no sync for it. The times compared are the warnings' own (the
// body's "as of"), not the records', which the mail actor stamps a little
// later. A store that cannot be read sends the mail: a duplicate is better
// than a lost warning.
func (m *Mailer) sentBefore(msg *Message) bool {
	w := msg.warning
	at := w.At.UTC()
	hourly := w.Kind == quota.WarnHourly80 || w.Kind == quota.WarnHourlyCap
	same := func(r *storage.Mail) bool {
		if r.Account != msg.Account || r.Kind != msg.Kind {
			return false
		}
		limit, prev, ok := warnFigures(r.Body)
		switch {
		case !ok || at.Before(prev): // a clock since set back
			return false
		case hourly:
			return at.Sub(prev) < 24*time.Hour
		default:
			return limit == w.Limit && prev.Year() == at.Year() && prev.Month() == at.Month()
		}
	}
	for _, r := range m.unstored {
		if same(r) {
			return true
		}
	}
	// Records are stamped after their warning: a minute's margin before
	// the earliest warning that could count.
	since := time.Date(at.Year(), at.Month(), 1, 0, 0, 0, 0, time.UTC)
	if hourly {
		since = at.Add(-24 * time.Hour)
	}
	recs, err := m.cfg.DB.MailOfSince(msg.Account, since.Add(-time.Minute))
	if err != nil {
		m.cfg.Logger.Warn("mail outbox: not read to check for an earlier usage warning; sending it", "kind", msg.Kind, "account", msg.Account, "err", err)
		return false
	}
	for _, r := range recs {
		if same(r) {
			return true
		}
	}
	return false
}

// warnFigures reads the limit and the time a usage warning's body
// (warnBody) names.
func warnFigures(body string) (limit int64, at time.Time, ok bool) {
	var used int64
	_, figures, found := strings.Cut(body, " has used ")
	if _, err := fmt.Sscanf(figures, "%d of %d", &used, &limit); !found || err != nil {
		return 0, time.Time{}, false
	}
	_, rest, found := strings.Cut(body, " as of ")
	stamp, _, _ := strings.Cut(rest, ".\n")
	at, err := time.Parse(time.RFC3339, stamp)
	if !found || err != nil {
		return 0, time.Time{}, false
	}
	return limit, at, true
}

// deliver speaks SMTP to the configured server.
func (m *Mailer) deliver(rec *storage.Mail) error {
	t := m.smtp
	conn, err := net.DialTimeout("tcp", t.addr, m.cfg.Timeout)
	if err != nil {
		return fmt.Errorf("dial %s: %w", t.addr, err)
	}
	_ = conn.SetDeadline(time.Now().Add(m.cfg.Timeout))
	c, err := smtp.NewClient(conn, t.host)
	if err != nil {
		conn.Close()
		return fmt.Errorf("smtp greeting: %w", err)
	}
	defer c.Close()
	if ok, _ := c.Extension("STARTTLS"); ok && t.starttls {
		if err := c.StartTLS(&tls.Config{ServerName: t.host}); err != nil {
			return fmt.Errorf("starttls: %w", err)
		}
	}
	if t.user != "" {
		if err := c.Auth(smtp.PlainAuth("", t.user, t.pass, t.host)); err != nil {
			return fmt.Errorf("smtp auth: %w", err)
		}
	}
	if err := c.Mail(t.from); err != nil {
		return fmt.Errorf("MAIL FROM: %w", err)
	}
	if err := c.Rcpt(rec.To); err != nil {
		return fmt.Errorf("RCPT TO: %w", err)
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("DATA: %w", err)
	}
	if _, err := w.Write(compose(t.from, rec)); err != nil {
		return fmt.Errorf("write message: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("end message: %w", err)
	}
	if err := c.Quit(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("QUIT: %w", err)
	}
	return nil
}

// compose writes an RFC 5322 plain-text message with CRLF line ends.
func compose(from string, rec *storage.Mail) []byte {
	var b strings.Builder
	hdr := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	hdr("From", from)
	hdr("To", rec.To)
	hdr("Subject", rec.Subject)
	hdr("Date", rec.At.Format(time.RFC1123Z))
	hdr("Message-ID", "<"+rec.ID+"@fraudd>")
	hdr("MIME-Version", "1.0")
	hdr("Content-Type", "text/plain; charset=utf-8")
	b.WriteString("\r\n")
	b.WriteString(strings.ReplaceAll(strings.ReplaceAll(rec.Body, "\r\n", "\n"), "\n", "\r\n"))
	b.WriteString("\r\n")
	return []byte(b.String())
}

func warnSubject(w quota.Warning) string {
	switch w.Kind {
	case quota.WarnHourly80:
		return "Usage warning: 80% of your hourly limit used"
	case quota.WarnHourlyCap:
		return "Usage warning: hourly limit reached"
	case quota.WarnMonthly80:
		return "Usage warning: about 80% of this month's visitor checks used"
	case quota.WarnMonthlyCap:
		return "Usage warning: this month's visitor checks are used up"
	case quota.WarnLookups80:
		return "Usage warning: about 80% of this month's lookups used"
	default:
		return "Usage warning: this month's lookups are used up"
	}
}

func warnBody(w quota.Warning) string {
	// The hourly window is the key's own (live and test keys have separate
	// buckets); the month is the account's, which both keys' calls count
	// toward (SPEC §8), so "your test key has used 9,000" named a figure
	// the test key may have added one call to.
	who := fmt.Sprintf("%s key", w.Bucket)
	if w.Kind != quota.WarnHourly80 && w.Kind != quota.WarnHourlyCap {
		who = "account"
	}
	return fmt.Sprintf("Your %s has used %d of %d (%s) as of %s.\n\n"+
		"Hourly windows start at the first request and last one hour; monthly allowances renew at 00:00 UTC on the 1st.\n"+
		"Requests past a limit are answered 429 with Retry-After.\n",
		who, w.Used, w.Limit, w.Kind, w.At.UTC().Format(time.RFC3339))
}

// withoutAddresses masks every email address in an SMTP error: a server's
// refusal usually quotes the recipient ("550 <owner@…>: Recipient address
// rejected"), and the log is read by more people than the outbox, which
// keeps the whole reply behind the operator token. An address is a run of
// the characters RFC 5322 allows around an @ with something on both sides.
func withoutAddresses(s string) string {
	if strings.IndexByte(s, '@') < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		at := strings.IndexByte(s[i:], '@')
		if at < 0 {
			b.WriteString(s[i:])
			break
		}
		at += i
		start := at
		for start > i && addressByte(s[start-1]) {
			start--
		}
		end := at + 1
		for end < len(s) && addressByte(s[end]) && s[end] != '@' {
			end++
		}
		for end > at+1 && s[end-1] == '.' { // a sentence's full stop
			end--
		}
		if start == at || end == at+1 {
			b.WriteString(s[i : at+1])
			i = at + 1
			continue
		}
		b.WriteString(s[i:start])
		b.WriteString("[address]")
		i = end
	}
	return b.String()
}

// addressByte reports whether c may be part of an address's local part or
// domain (atext, dots, and bytes of non-ASCII names).
func addressByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c >= 0x80:
		return true
	}
	return strings.IndexByte(".!#$%&'*+/=?^_`{|}~-", c) >= 0
}
