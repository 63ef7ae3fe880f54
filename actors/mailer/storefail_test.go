package mailer

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/storage"
	"github.com/fraudd/fraudd/storage/storagetest"
)

// failingSetup is setup on a store that can be stopped: the returned
// breakStore fails a synced write, which stops the store's instance (every
// write answers ErrUnavailable) until the health probe reopens it
// (db.Probe).
func failingSetup(t *testing.T, smtpURL string) (*Mailer, *accounts.Created, *storage.DB, func()) {
	t.Helper()
	fs, failing := storagetest.FailingWrites()
	m, c, db := setupOn(t, storage.Options{FS: fs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, smtpURL)
	return m, c, db, func() {
		t.Helper()
		failing.Store(true)
		defer failing.Store(false)
		if err := db.Probe(); err == nil {
			t.Fatal("a synced write on a failing disk succeeded")
		}
	}
}

// TestOutboxKeepsMailWhileStoreDown: README, "the outbox records every mail
// either way". A usage warning and a webhook notice generated while the
// store is unavailable are in the outbox once it is back, not dropped with
// an ERROR line; with SMTP configured the outcome of the attempt made
// meanwhile is what the record says.
func TestOutboxKeepsMailWhileStoreDown(t *testing.T) {
	t.Run("no smtp", func(t *testing.T) {
		m, c, db, breakStore := failingSetup(t, "")
		breakStore()
		m.Warn(quota.Warning{Account: c.View.ID, Kind: quota.WarnMonthlyCap, Bucket: quota.Live, Limit: 1000, Used: 1000, At: time.Now()})
		m.Send(Message{Account: c.View.ID, Kind: "webhook_failures", Subject: "s", Body: "b"})
		time.Sleep(100 * time.Millisecond)
		if err := db.Probe(); err != nil {
			t.Fatal(err)
		}
		var recs []*storage.Mail
		waitFor(t, func() bool { recs, _ = m.Recent(10); return len(recs) == 2 })
		for _, r := range recs {
			if r.Status != "recorded" || r.To != "owner@example.com" {
				t.Errorf("outbox: %+v", r)
			}
		}
	})
	t.Run("smtp", func(t *testing.T) {
		box, addr := startSMTP(t)
		m, c, db, breakStore := failingSetup(t, "smtp://"+addr+"?starttls=false")
		breakStore()
		m.Send(Message{Account: c.View.ID, Kind: "webhook_failures", Subject: "s", Body: "b"})
		waitFor(t, func() bool { return box.count() == 1 })
		time.Sleep(100 * time.Millisecond) // the outcome's write fails too
		if err := db.Probe(); err != nil {
			t.Fatal(err)
		}
		var recs []*storage.Mail
		waitFor(t, func() bool { recs, _ = m.Recent(10); return len(recs) == 1 && recs[0].Status == "sent" })
	})
}

// TestOutboxKeptMailIsBounded: the records kept while the store is down
// are bounded (maxUnstored); past it the oldest are dropped, the newest
// stored once the store is back.
func TestOutboxKeptMailIsBounded(t *testing.T) {
	m, c, db, breakStore := failingSetup(t, "")
	m.maxUnstored = 3
	breakStore()
	for _, subj := range []string{"1", "2", "3", "4", "5"} {
		m.Send(Message{Account: c.View.ID, Kind: "webhook_failures", Subject: subj, Body: "b"})
	}
	time.Sleep(100 * time.Millisecond)
	if err := db.Probe(); err != nil {
		t.Fatal(err)
	}
	var recs []*storage.Mail
	waitFor(t, func() bool { recs, _ = m.Recent(10); return len(recs) == 3 })
	time.Sleep(50 * time.Millisecond)
	recs, _ = m.Recent(10)
	got := ""
	for _, r := range recs {
		got = r.Subject + got // oldest first
	}
	if got != "345" {
		t.Fatalf("outbox after 5 mails with room for 3: subjects %q, want the newest three", got)
	}
}
