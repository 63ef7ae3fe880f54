package mailer

import (
	"strings"
	"testing"
)

// FuzzParseSMTPURL: --smtp-url (the operator's) reads without a panic, and
// an error, which reaches the log, never carries the password.
func FuzzParseSMTPURL(f *testing.F) {
	f.Add("smtp", "u", "s3cret-pass", "mail.example:2525?from=a@b.c")
	f.Add("http", "u", "s3cret-pass", "x")
	f.Add("smtp", "u", "s3cret%zz", "host")
	f.Fuzz(func(t *testing.T, scheme, user, pass, rest string) {
		raw := scheme + "://" + user + ":" + pass + "@" + rest
		tg, err := ParseSMTPURL(raw)
		if err == nil {
			if tg.addr == "" || tg.from == "" {
				t.Fatalf("%q read as %+v", raw, tg)
			}
			return
		}
		if len(pass) >= 6 && !strings.Contains(scheme+user+rest, pass) && strings.Contains(err.Error(), pass) {
			t.Fatalf("%q: the error shows the password: %v", raw, err)
		}
	})
}
