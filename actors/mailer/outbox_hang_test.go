package mailer

import (
	"net"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
)

// TestOutboxRecordsWhileSMTPHangs: ADMIN.md "SMTP is used when configured,
// the outbox always records". An SMTP server that accepts connections but
// never answers does not keep messages out of the outbox, nor does a stop
// while it holds them: each is recorded before SMTP is tried.
func TestOutboxRecordsWhileSMTPHangs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c // never greets
		}
	}()
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sys := actor.NewActorSystem()
	accts, err := accounts.Start(sys.Root, accounts.Config{DB: db, Master: secrets.FromBytes([]byte("m"))})
	if err != nil {
		t.Fatal(err)
	}
	defer accts.Stop()
	c, err := accts.Create(accounts.NewAccount{Email: "owner@example.com", Plan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(sys.Root, Config{DB: db, Accounts: accts, SMTPURL: "smtp://" + ln.Addr().String() + "?starttls=false", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		m.Send(Message{Account: c.View.ID, Kind: "webhook_failures", Subject: "s", Body: "b"})
	}
	_ = m.StopBy(time.Now().Add(time.Second))
	recs, err := m.Recent(10)
	if err != nil || len(recs) != 3 {
		t.Fatalf("outbox after stop: %d records of 3 messages sent (%v)", len(recs), err)
	}
	for _, r := range recs {
		if r.Status != "recorded" {
			t.Errorf("a message the hung server never took reads %q", r.Status)
		}
	}
}
