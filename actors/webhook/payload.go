package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fraudd/fraudd/internal/secrets"
)

// Event kinds (SPEC §6).
const (
	KindThreat = "threat.detected"
	KindTest   = "test"
)

// Event is one webhook-worthy evaluation, as the evaluate handler saw it.
// Every string must be owned by the event (copied out of request buffers).
type Event struct {
	Account    string
	At         time.Time // the evaluation's time: the payload's timestamp
	IP         string    // "unknown" on the degraded answer
	ThreatType string
	Details    Details
}

// Details are the payload's details object. Network flags are false on a
// degraded evaluation (unavailable evidence), as in the evaluate answer.
type Details struct {
	Country        string // "" reads null
	VPN            bool
	Proxied        bool // also true for a privacy relay
	Tor            bool
	DCH            bool
	Bot            bool // automation
	Tampering      bool // a tampered browser (antidetect) or an emulator
	Antidetect     bool
	VirtualMachine bool
	PrivacyRelay   bool
	Decision       string
	// RuleMatched and ExceptionMatched read null when empty.
	RuleMatched      []string
	ExceptionMatched []string
}

// payload is the JSON body of SPEC §6, fields in the SPEC's order.
type payload struct {
	Event      string         `json:"event"`
	EventID    string         `json:"event_id"`
	Timestamp  string         `json:"timestamp"`
	IP         string         `json:"ip"`
	ThreatType string         `json:"threat_type"`
	Details    payloadDetails `json:"details"`
}

type payloadDetails struct {
	IP               string   `json:"ip"`
	CC               *string  `json:"cc"`
	VPN              bool     `json:"vpn"`
	Proxied          bool     `json:"proxied"`
	Tor              bool     `json:"tor"`
	DCH              bool     `json:"dch"`
	Bot              bool     `json:"bot"`
	Tampering        bool     `json:"tampering"`
	Antidetect       bool     `json:"antidetect"`
	VirtualMachine   bool     `json:"virtual_machine"`
	PrivacyRelay     bool     `json:"privacy_relay"`
	Decision         string   `json:"decision"`
	RuleMatched      []string `json:"rule_matched"`
	ExceptionMatched []string `json:"exception_matched"`
}

// Payload renders the JSON body of an event of kind with id: the exact bytes
// that are signed and sent to a plain (non-chat) endpoint.
func Payload(kind, id string, ev *Event) []byte {
	d := &ev.Details
	p := payload{
		Event: kind, EventID: id, Timestamp: ev.At.UTC().Format(time.RFC3339), IP: ev.IP, ThreatType: ev.ThreatType,
		Details: payloadDetails{
			IP: ev.IP, VPN: d.VPN, Proxied: d.Proxied, Tor: d.Tor, DCH: d.DCH, Bot: d.Bot, Tampering: d.Tampering,
			Antidetect: d.Antidetect, VirtualMachine: d.VirtualMachine, PrivacyRelay: d.PrivacyRelay, Decision: d.Decision,
		},
	}
	if d.Country != "" {
		cc := d.Country
		p.Details.CC = &cc
	}
	if len(d.RuleMatched) > 0 {
		p.Details.RuleMatched = d.RuleMatched
	}
	if len(d.ExceptionMatched) > 0 {
		p.Details.ExceptionMatched = d.ExceptionMatched
	}
	return marshal(&p)
}

// marshal encodes v without HTML escaping and without the trailing newline.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only plain structs of strings and bools are encoded here.
		panic("webhook: encode payload: " + err.Error())
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// NewEventID returns a fresh event id: 32 lowercase hex characters.
func NewEventID() string { return secrets.RandomHex(16) }

// Sign returns the X-Service-Signature value for body sent at unix seconds
// ts: "sha256=" + hex HMAC-SHA256(secret, ts + "." + body). The key is the
// whole secret string as shown, "whsec_" included.
func Sign(secret string, ts int64, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	var tb [20]byte
	m.Write(strconv.AppendInt(tb[:0], ts, 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// SampleEvent is the test event's content: the same shape as a real alert,
// with sample values (a documentation address seen as a Tor exit).
func SampleEvent(account string, now time.Time) *Event {
	return &Event{Account: account, At: now, IP: "203.0.113.7", ThreatType: "Tor",
		Details: Details{Country: "DE", Tor: true, Decision: "block"}}
}

// chatText is the one-message summary Slack and Discord receive: head names
// the threat, tail the event (its id, which a reader quotes to find it).
func chatText(kind, id string, ev *Event) (head, tail string) {
	var b strings.Builder
	if kind == KindTest {
		b.WriteString("Test event from fraudd: webhook deliveries to this channel work. Sample alert: ")
	} else {
		b.WriteString("Threat detected: ")
	}
	b.WriteString(ev.ThreatType)
	b.WriteString(" from ")
	b.WriteString(ev.IP)
	if ev.Details.Country != "" {
		b.WriteString(" (" + ev.Details.Country + ")")
	}
	b.WriteString(", decision " + ev.Details.Decision)
	if len(ev.Details.RuleMatched) > 0 {
		b.WriteString(", rules matched: " + strings.Join(ev.Details.RuleMatched, ", "))
	}
	if len(ev.Details.ExceptionMatched) > 0 {
		b.WriteString(", exceptions matched: " + strings.Join(ev.Details.ExceptionMatched, ", "))
	}
	return b.String(), ". Event " + id + " at " + ev.At.UTC().Format(time.RFC3339) + "."
}

// slackEscaper escapes what Slack reads as markup in a message's text: "<…>"
// is a link or a mention (<!channel> pages everyone) and "&" an entity.
// Exception labels are free text, and must show as typed.
var slackEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// discordMaxContent is the most characters Discord takes in a message's
// content: a longer one is refused (400), so the alert would fail every
// attempt. Eight matched pins with long labels exceed it.
const discordMaxContent = 2000

// fitText joins head and tail in at most max characters, cutting the end of
// head (marked "…") so that the event id in tail always arrives.
func fitText(head, tail string, max int) string {
	if utf8.RuneCountInString(head)+utf8.RuneCountInString(tail) <= max {
		return head + tail
	}
	keep := max - utf8.RuneCountInString(tail) - 1
	for i := range head {
		if keep == 0 {
			return head[:i] + "…" + tail
		}
		keep--
	}
	return head + tail // not reached: head was longer than keep
}

// chatBody renders the body for a chat endpoint: Slack's {"text"} or
// Discord's {"content"}, with mentions off (a label's "@everyone" must not
// page the channel).
func chatBody(c chat, kind, id string, ev *Event) []byte {
	head, tail := chatText(kind, id, ev)
	if c == chatDiscord {
		type mentions struct {
			Parse []string `json:"parse"`
		}
		return marshal(&struct {
			Content         string   `json:"content"`
			AllowedMentions mentions `json:"allowed_mentions"`
		}{fitText(head, tail, discordMaxContent), mentions{Parse: []string{}}})
	}
	return marshal(&struct {
		Text string `json:"text"`
	}{slackEscaper.Replace(head + tail)})
}
