package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestSignMatchesIndependentHMAC(t *testing.T) {
	// Pinned vector, computed outside Go:
	// python3 -c 'import hmac,hashlib; print(hmac.new(b"whsec_test", b"1767225600.{\"event\":\"test\"}", hashlib.sha256).hexdigest())'
	const want = "sha256=9d527e17d8f9c0bb7eddbb3ca13ba378cb50e4bb2341469c74cf937d1b11eef7"
	if got := Sign("whsec_test", 1767225600, []byte(`{"event":"test"}`)); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	// And for arbitrary bodies, the receiver's recipe from SPEC §6.
	for i, body := range []string{"", "{}", `{"a":"é\u2028"}`, strings.Repeat("x", 5000)} {
		secret := fmt.Sprintf("whsec_%d", i)
		ts := int64(1700000000 + i)
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(fmt.Sprintf("%d.%s", ts, body)))
		if got, want := Sign(secret, ts, []byte(body)), "sha256="+hex.EncodeToString(m.Sum(nil)); got != want {
			t.Errorf("body %d: %s != %s", i, got, want)
		}
	}
}

func TestEventIDs(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{32}$`)
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := NewEventID()
		if !re.MatchString(id) || seen[id] {
			t.Fatalf("event id %q (repeat: %v)", id, seen[id])
		}
		seen[id] = true
	}
}

func TestPayloadGolden(t *testing.T) {
	at := time.Date(2026, 11, 2, 10, 30, 0, 0, time.UTC)
	cases := []struct {
		name string
		kind string
		ev   *Event
		want string
	}{
		{"rule-decided block, degraded", KindThreat, &Event{Account: "acc_1", At: at, IP: "unknown", ThreatType: "Custom rule (disposable_email)",
			Details: Details{Decision: "block", RuleMatched: []string{"disposable_email"}}},
			`{"event":"threat.detected","event_id":"0123456789abcdef0123456789abcdef","timestamp":"2026-11-02T10:30:00Z","ip":"unknown","threat_type":"Custom rule (disposable_email)",` +
				`"details":{"ip":"unknown","cc":null,"vpn":false,"proxied":false,"tor":false,"dch":false,"bot":false,"tampering":false,"antidetect":false,"virtual_machine":false,"privacy_relay":false,"decision":"block","rule_matched":["disposable_email"],"exception_matched":null}}`},
		{"engine threat with a pin", KindThreat, &Event{Account: "acc_1", At: at.In(time.FixedZone("x", 3600)), IP: "73.158.64.21", ThreatType: "Customer exception (ring <&>)",
			Details: Details{Country: "US", VPN: true, Proxied: true, PrivacyRelay: true, DCH: true, Bot: true, Tampering: true, Antidetect: true, VirtualMachine: true, Tor: true,
				Decision: "block", RuleMatched: []string{}, ExceptionMatched: []string{"ring <&>", "73.158.64.0/24"}}},
			`{"event":"threat.detected","event_id":"0123456789abcdef0123456789abcdef","timestamp":"2026-11-02T10:30:00Z","ip":"73.158.64.21","threat_type":"Customer exception (ring <&>)",` +
				`"details":{"ip":"73.158.64.21","cc":"US","vpn":true,"proxied":true,"tor":true,"dch":true,"bot":true,"tampering":true,"antidetect":true,"virtual_machine":true,"privacy_relay":true,"decision":"block","rule_matched":null,"exception_matched":["ring <&>","73.158.64.0/24"]}}`},
		{"test event", KindTest, SampleEvent("acc_1", at),
			`{"event":"test","event_id":"0123456789abcdef0123456789abcdef","timestamp":"2026-11-02T10:30:00Z","ip":"203.0.113.7","threat_type":"Tor",` +
				`"details":{"ip":"203.0.113.7","cc":"DE","vpn":false,"proxied":false,"tor":true,"dch":false,"bot":false,"tampering":false,"antidetect":false,"virtual_machine":false,"privacy_relay":false,"decision":"block","rule_matched":null,"exception_matched":null}}`},
	}
	for _, c := range cases {
		got := string(Payload(c.kind, "0123456789abcdef0123456789abcdef", c.ev))
		if got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(got), &m); err != nil {
			t.Errorf("%s: not JSON: %v", c.name, err)
		}
	}
}

func TestChatBodies(t *testing.T) {
	at := time.Date(2026, 11, 2, 10, 30, 0, 0, time.UTC)
	ev := &Event{At: at, IP: "198.51.100.4", ThreatType: "Tor", Details: Details{Country: "NL", Tor: true, Decision: "block", RuleMatched: []string{"tor"}}}
	for _, c := range []struct {
		url  string
		chat chat
	}{
		{"https://hooks.slack.com/services/T0/B0/xyz", chatSlack},
		{"https://hooks.slack-gov.com/services/T0/B0/xyz", chatSlack},
		{"https://HOOKS.SLACK.COM./services/T0/B0/xyz", chatSlack},
		{"https://discord.com/api/webhooks/1/abc", chatDiscord},
		{"https://discordapp.com/api/webhooks/1/abc", chatDiscord},
		{"https://ptb.discord.com/api/webhooks/1/abc", chatDiscord},
		// Discord's versioned API path names the same webhook.
		{"https://discord.com/api/v10/webhooks/1/abc", chatDiscord},
		{"https://discordapp.com/api/v9/webhooks/1/abc", chatDiscord},
		// Discord's Slack-compatible endpoint reads Slack's {"text"}.
		{"https://discord.com/api/webhooks/1/abc/slack", chatSlack},
		{"https://discord.com/api/v10/webhooks/1/abc/slack", chatSlack},
		{"https://discord.com/api/vx/webhooks/1/abc", chatNone},
		{"https://discord.com/api/v10/channels/1", chatNone},
		{"https://discord.com/other", chatNone},
		{"https://hooks.slack.com.evil.example/services/x", chatNone},
		{"https://example.com/api/webhooks/1", chatNone},
	} {
		if got := chatOf(c.url); got != c.chat {
			t.Errorf("chatOf(%s) = %d, want %d", c.url, got, c.chat)
		}
	}
	const text = "Threat detected: Tor from 198.51.100.4 (NL), decision block, rules matched: tor. Event e1 at 2026-11-02T10:30:00Z."
	if got := string(chatBody(chatSlack, KindThreat, "e1", ev)); got != `{"text":"`+text+`"}` {
		t.Errorf("slack: %s", got)
	}
	if got := string(chatBody(chatDiscord, KindThreat, "e1", ev)); got != `{"content":"`+text+`","allowed_mentions":{"parse":[]}}` {
		t.Errorf("discord: %s", got)
	}
	if got := string(chatBody(chatSlack, KindTest, "e2", SampleEvent("a", at))); !strings.HasPrefix(got, `{"text":"Test event from fraudd`) {
		t.Errorf("slack test event: %s", got)
	}
}

func TestCheckURL(t *testing.T) {
	for _, c := range []struct {
		in      string
		private bool
		want    string // "" = rejected
	}{
		{"https://hooks.example/fraud", false, "https://hooks.example/fraud"},
		{" HTTPS://Receiver.example.com:8443/x?y=1#frag ", false, "https://Receiver.example.com:8443/x?y=1"},
		{"https://8.8.8.8/hook", false, "https://8.8.8.8/hook"},
		{"https://[2606:4700::1111]/hook", false, "https://[2606:4700::1111]/hook"},
		{"http://hooks.example/fraud", false, ""},
		{"https://127.0.0.1/hook", false, ""},
		{"https://10.1.2.3/hook", false, ""},
		{"https://192.168.0.10/hook", false, ""},
		{"https://[::1]/hook", false, ""},
		{"https://[::ffff:127.0.0.1]/hook", false, ""},
		{"https://169.254.169.254/latest", false, ""},
		{"https://localhost/hook", false, ""},
		{"https://printer.local/hook", false, ""},
		{"https://intranet/hook", false, ""},
		{"not a url", false, ""},
		{"ftp://hooks.example/x", false, ""},
		{"https:///nohost", false, ""},
		{"mailto:a@b.co", false, ""},
		{"", false, ""},
		// A port no connection can use is refused when the receiver is set,
		// not at every delivery.
		{"https://hooks.example:99999/fraud", false, ""},
		{"https://hooks.example:0/fraud", false, ""},
		{"https://hooks.example:65536/fraud", false, ""},
		{"http://127.0.0.1:70000/hook", true, ""},
		{"https://hooks.example:65535/fraud", false, "https://hooks.example:65535/fraud"},
		{"https://hooks.example:/fraud", false, "https://hooks.example:/fraud"},
		{"http://127.0.0.1:8080/hook", true, "http://127.0.0.1:8080/hook"},
		{"https://localhost/hook", true, "https://localhost/hook"},
		{"ftp://127.0.0.1/x", true, ""},
		{"not a url", true, ""},
	} {
		got, err := CheckURL(c.in, c.private)
		if got != c.want || (err == nil) != (c.want != "") {
			t.Errorf("CheckURL(%q, %v) = %q, %v; want %q", c.in, c.private, got, err, c.want)
		}
	}
}

// TestSlackTextEscaped: Slack reads "<…>" in a message's text as a link or a
// mention (<!channel> pages everyone) and "&" as an entity, and asks senders
// to escape those three characters; an exception label is the operator's
// free text, so "Partner <ACME> & co" must arrive as typed.
func TestSlackTextEscaped(t *testing.T) {
	at := time.Date(2026, 11, 2, 10, 30, 0, 0, time.UTC)
	ev := &Event{At: at, IP: "198.51.100.4", ThreatType: "Customer exception (Partner <ACME> & co)",
		Details: Details{Decision: "block", ExceptionMatched: []string{"Partner <ACME> & co", "<!channel>"}}}
	var m struct{ Text string }
	if err := json.Unmarshal(chatBody(chatSlack, KindThreat, "e1", ev), &m); err != nil {
		t.Fatal(err)
	}
	const want = "Threat detected: Customer exception (Partner &lt;ACME&gt; &amp; co) from 198.51.100.4, decision block, " +
		"exceptions matched: Partner &lt;ACME&gt; &amp; co, &lt;!channel&gt;. Event e1 at 2026-11-02T10:30:00Z."
	if m.Text != want {
		t.Errorf("slack text:\n got %s\nwant %s", m.Text, want)
	}
}

// TestDiscordContentFitsAndMentionsNothing: Discord refuses (400) a message
// whose content is over 2,000 characters, so such an alert failed every
// attempt; eight matched pins with 200-character labels (the most a request
// can match, the longest label) made one. And a label's "@everyone" must not
// page the channel.
func TestDiscordContentFitsAndMentionsNothing(t *testing.T) {
	at := time.Date(2026, 11, 2, 10, 30, 0, 0, time.UTC)
	label := "@everyone " + strings.Repeat("é", 190)
	ev := &Event{At: at, IP: "2001:db8:1234:5678:9abc:def0:1234:5678", ThreatType: "Customer exception (" + label + ")",
		Details: Details{Country: "DE", Decision: "block"}}
	for i := 0; i < 8; i++ {
		ev.Details.ExceptionMatched = append(ev.Details.ExceptionMatched, label)
	}
	var m struct {
		Content         string
		AllowedMentions *struct {
			Parse []string `json:"parse"`
		} `json:"allowed_mentions"`
	}
	if err := json.Unmarshal(chatBody(chatDiscord, KindThreat, "0123456789abcdef0123456789abcdef", ev), &m); err != nil {
		t.Fatal(err)
	}
	if n := len([]rune(m.Content)); n > 2000 {
		t.Errorf("discord content is %d characters, Discord takes at most 2000", n)
	}
	if !strings.HasPrefix(m.Content, "Threat detected: Customer exception (@everyone ") ||
		!strings.HasSuffix(m.Content, "…. Event 0123456789abcdef0123456789abcdef at 2026-11-02T10:30:00Z.") {
		t.Errorf("discord content not cut in the middle, keeping the event id: %s", m.Content)
	}
	if m.AllowedMentions == nil || m.AllowedMentions.Parse == nil || len(m.AllowedMentions.Parse) != 0 {
		t.Errorf("discord body does not turn mentions off: %+v", m.AllowedMentions)
	}
}
