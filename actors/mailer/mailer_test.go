package mailer

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"
	gosmtp "github.com/emersion/go-smtp"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
	"github.com/fraudd/fraudd/storage/storagetest"
)

// inbox is an in-process SMTP server on loopback.
type inbox struct {
	mu   sync.Mutex
	msgs []received
	// rejectRcpt, when set, refuses every recipient with this reply.
	rejectRcpt *gosmtp.SMTPError
}

type received struct{ from, to, data string }

type session struct {
	in   *inbox
	from string
	to   []string
}

func (b *inbox) NewSession(*gosmtp.Conn) (gosmtp.Session, error) { return &session{in: b}, nil }
func (s *session) Reset()                                        {}
func (s *session) Logout() error                                 { return nil }
func (s *session) Mail(from string, _ *gosmtp.MailOptions) error { s.from = from; return nil }
func (s *session) Rcpt(to string, _ *gosmtp.RcptOptions) error {
	if s.in.rejectRcpt != nil {
		return s.in.rejectRcpt
	}
	s.to = append(s.to, to)
	return nil
}
func (s *session) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.in.mu.Lock()
	s.in.msgs = append(s.in.msgs, received{s.from, strings.Join(s.to, ","), string(b)})
	s.in.mu.Unlock()
	return nil
}

func (b *inbox) count() int { b.mu.Lock(); defer b.mu.Unlock(); return len(b.msgs) }

func startSMTP(t *testing.T) (*inbox, string) {
	t.Helper()
	return startSMTPWith(t, &inbox{})
}

func startSMTPWith(t *testing.T, box *inbox) (*inbox, string) {
	t.Helper()
	srv := gosmtp.NewServer(box)
	srv.Domain = "localhost"
	srv.AllowInsecureAuth = true
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return box, ln.Addr().String()
}

func setup(t *testing.T, smtpURL string) (*Mailer, *accounts.Created, *storage.DB) {
	t.Helper()
	return setupOn(t, storage.Options{FS: vfs.NewMem()}, smtpURL)
}

// setupOn is setup on a store opened with opts.
func setupOn(t *testing.T, opts storage.Options, smtpURL string) (*Mailer, *accounts.Created, *storage.DB) {
	t.Helper()
	return setupLogged(t, opts, smtpURL, nil)
}

// setupLogged is setupOn with the mailer logging to logger (nil: the default).
func setupLogged(t *testing.T, opts storage.Options, smtpURL string, logger *slog.Logger) (*Mailer, *accounts.Created, *storage.DB) {
	t.Helper()
	db, err := storage.Open("d", opts)
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	accts, err := accounts.Start(sys.Root, accounts.Config{DB: db, Master: secrets.FromBytes([]byte("m"))})
	if err != nil {
		t.Fatal(err)
	}
	c, err := accts.Create(accounts.NewAccount{Email: "owner@example.com", Plan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(sys.Root, Config{DB: db, Accounts: accts, SMTPURL: smtpURL, Timeout: 5 * time.Second, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(); accts.Stop(); sys.Shutdown(); db.Close() })
	return m, c, db
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not met within 5s")
}

func TestWarningSentOverSMTPAndRecorded(t *testing.T) {
	box, addr := startSMTP(t)
	m, c, _ := setup(t, "smtp://"+addr+"?from=alerts@fraudd.test&starttls=false")
	m.Warn(quota.Warning{Account: c.View.ID, Kind: quota.WarnHourly80, Bucket: quota.Live, Limit: 1000, Used: 800, At: time.Now()})
	waitFor(t, func() bool { return box.count() == 1 })
	got := box.msgs[0]
	if got.from != "alerts@fraudd.test" || got.to != "owner@example.com" || !strings.Contains(got.data, "Subject: Usage warning: 80% of your hourly limit used") ||
		!strings.Contains(got.data, "800 of 1000") {
		t.Fatalf("received: %+v", got)
	}
	var recs []*storage.Mail
	waitFor(t, func() bool { recs, _ = m.Recent(10); return len(recs) == 1 })
	if recs[0].Status != "sent" || recs[0].To != "owner@example.com" || recs[0].Kind != "usage_hourly_80" {
		t.Fatalf("outbox: %+v", recs[0])
	}
}

func TestOutboxWithoutSMTPAndFailedDelivery(t *testing.T) {
	m, c, _ := setup(t, "")
	m.Send(Message{Account: c.View.ID, Kind: "test", Subject: "s", Body: "b"})
	var recs []*storage.Mail
	waitFor(t, func() bool { recs, _ = m.Recent(10); return len(recs) == 1 })
	if recs[0].Status != "recorded" {
		t.Fatalf("no smtp: %+v", recs[0])
	}

	// A server that is not there: the attempt is recorded as failed.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	m2, c2, _ := setup(t, "smtp://"+dead)
	m2.Send(Message{Account: c2.View.ID, Kind: "test", Subject: "s", Body: "b"})
	waitFor(t, func() bool { recs, _ = m2.Recent(10); return len(recs) == 1 })
	if recs[0].Status != "failed" || recs[0].Error == "" {
		t.Fatalf("dead smtp: %+v", recs[0])
	}
}

func TestParseSMTPURL(t *testing.T) {
	tg, err := ParseSMTPURL("smtp://u:p@mail.example:2525?from=a@b.c")
	if err != nil || tg.addr != "mail.example:2525" || tg.user != "u" || tg.pass != "p" || tg.from != "a@b.c" || !tg.starttls {
		t.Fatalf("%+v %v", tg, err)
	}
	if _, err := ParseSMTPURL("http://x"); err == nil {
		t.Fatal("non-smtp scheme accepted")
	}
	if tg, err := ParseSMTPURL("smtp://mail.example"); err != nil || tg.addr != "mail.example:25" {
		t.Fatalf("no port (25): %+v %v", tg, err)
	}
	if tg, err := ParseSMTPURL("smtp://[::1]:587"); err != nil || tg.addr != "[::1]:587" {
		t.Fatalf("IPv6: %+v %v", tg, err)
	}
}

// TestParseSMTPURLRefusesUndiallable: a URL with no host, an empty port or
// one out of range started the service, and every mail then failed into
// the outbox (README Configuration: a value that does not work stops the
// start naming it).
func TestParseSMTPURLRefusesUndiallable(t *testing.T) {
	for _, raw := range []string{"smtp://:25", "smtp://u:s3cret@:25", "smtp://mail.example:", "smtp://mail.example:0", "smtp://mail.example:99999", "smtp://[::1]:"} {
		_, err := ParseSMTPURL(raw)
		if err == nil || !strings.Contains(err.Error(), "a host and a port from 1 to 65535") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: %v", raw, err)
		}
	}
}

// logRecords is a slog handler that keeps every record.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r)
	h.mu.Unlock()
	return nil
}
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecords) WithGroup(string) slog.Handler      { return h }

func (h *logRecords) find(level slog.Level, substr string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.Level == level && strings.Contains(r.Message, substr) {
			return true
		}
	}
	return false
}

// TestPruneFailureLoggedAtWarn: an outbox that cannot drop its records past
// retention says so where an operator looks (WARN), not at DEBUG.
func TestPruneFailureLoggedAtWarn(t *testing.T) {
	fs, failing := storagetest.FailingWrites()
	db, err := storage.Open("d", storage.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	accts, err := accounts.Start(sys.Root, accounts.Config{DB: db, Master: secrets.FromBytes([]byte("m"))})
	if err != nil {
		t.Fatal(err)
	}
	c, err := accts.Create(accounts.NewAccount{Email: "owner@example.com", Plan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logRecords{}
	m, err := New(sys.Root, Config{DB: db, Accounts: accts, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(); accts.Stop(); sys.Shutdown() })
	failing.Store(true)
	m.Send(Message{Account: c.View.ID, Kind: "test", Subject: "s", Body: "b"})
	waitFor(t, func() bool { return logs.find(slog.LevelWarn, "not pruned") })
}

// TestSMTPURLErrorHidesPassword: a refused SMTP URL is named in the error
// (which reaches the log) without its password, parsed or not.
func TestSMTPURLErrorHidesPassword(t *testing.T) {
	for _, raw := range []string{"smtp://user:s3cret@mail.example:25%zz", "http://user:s3cret@mail.example:25", "smtp://user:s3cret@"} {
		_, err := ParseSMTPURL(raw)
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: %v", raw, err)
		}
	}
}

// TestRefusalLoggedWithoutTheAddress: an SMTP server's refusal usually
// quotes the recipient ("550 <owner@…>: Recipient address rejected"); the
// log line that reports it must not carry the owner's address, which only
// the outbox (behind the operator token) shows.
func TestRefusalLoggedWithoutTheAddress(t *testing.T) {
	box, addr := startSMTPWith(t, &inbox{rejectRcpt: &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 1, 1},
		Message: "<Owner@Example.com>: Recipient address rejected: user unknown in local recipient table"}})
	_ = box
	logs := &logRecords{}
	m, c, _ := setupLogged(t, storage.Options{FS: vfs.NewMem()}, "smtp://"+addr+"?from=alerts@fraudd.test&starttls=false", slog.New(logs))
	m.Send(Message{Account: c.View.ID, Kind: "test", Subject: "s", Body: "b"})
	waitFor(t, func() bool { return logs.find(slog.LevelWarn, "mail not sent") })
	logs.mu.Lock()
	defer logs.mu.Unlock()
	for _, r := range logs.recs {
		var line strings.Builder
		line.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool { line.WriteString(" " + a.String()); return true })
		if s := strings.ToLower(line.String()); strings.Contains(s, "owner@example.com") {
			t.Fatalf("log line carries the owner's address: %s", line.String())
		} else if r.Message == "mail not sent" && !strings.Contains(s, "recipient address rejected") {
			t.Fatalf("log line lost the refusal's text: %s", line.String())
		}
	}
	var recs []*storage.Mail
	waitFor(t, func() bool { recs, _ = m.Recent(10); return len(recs) == 1 && recs[0].Status == "failed" })
	if !strings.Contains(recs[0].Error, "Owner@Example.com") {
		t.Fatalf("the outbox keeps the server's whole reply for the operator: %q", recs[0].Error)
	}
}

func TestWithoutAddresses(t *testing.T) {
	for in, want := range map[string]string{
		"RCPT TO: 550 5.1.1 <a.b+c@x.example>: rejected": "RCPT TO: 550 5.1.1 <[address]>: rejected",
		"dial 10.0.0.1:25: refused":                      "dial 10.0.0.1:25: refused",
		"two a@b.c, d@e.f":                               "two [address], [address]",
		"trailing @":                                     "trailing @",
		"":                                               "",
	} {
		if got := withoutAddresses(in); got != want {
			t.Errorf("withoutAddresses(%q) = %q, want %q", in, got, want)
		}
	}
}
