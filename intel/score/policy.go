package score

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Policy is an account's custom rules and exception pins (ADMIN.md). It is
// read-only once built: Evaluate and Result keep referring to Pins.
type Policy struct {
	Rules []Rule
	Pins  []Pin
}

// Rule maps a signal to an action. When the signal fires, the rule applies;
// among applied rules the most severe action wins and replaces the engine's
// decision (SPEC 2.2 decision).
type Rule struct {
	Signal Signal
	Action Action
}

// Pin is an exception pin: an address or CIDR (Prefix valid) or a device
// (VisitorID non-empty). A pin that matches outranks every rule. Build pins
// with ParsePin, which makes exactly one of the two targets set.
type Pin struct {
	Prefix    netip.Prefix // masked; a single address is a full-length prefix
	VisitorID string
	Action    Action
	Label     string
}

// IsIP reports whether p targets addresses rather than a device.
func (p Pin) IsIP() bool { return p.Prefix.IsValid() }

// Text returns the pin's target as the admin API shows it: the address for a
// single-address pin, CIDR notation for a range, else the visitor id.
func (p Pin) Text() string {
	if p.Prefix.IsValid() {
		if p.Prefix.IsSingleIP() {
			return p.Prefix.Addr().String()
		}
		return p.Prefix.String()
	}
	return p.VisitorID
}

// Name is how a matched pin is reported (exception_matched, webhook
// threat_type): its label, or its target when it has no label.
func (p Pin) Name() string {
	if p.Label != "" {
		return p.Label
	}
	return p.Text()
}

// specificity ranks pins that match the same request: a device pin is
// narrower than any address pin (an address is shared behind NAT or CGNAT),
// and a longer prefix is narrower than a shorter one.
func (p Pin) specificity() int {
	if p.Prefix.IsValid() {
		return p.Prefix.Bits()
	}
	return 129
}

// ErrInvalidPolicy matches (errors.Is) every error of the parse and
// validation helpers. Their Error text carries no prefix and is meant for the
// admin API's 400 body as is, e.g. `rules[2]: signal vpn appears twice`.
var ErrInvalidPolicy = errors.New("invalid policy")

type policyError string

func (e policyError) Error() string        { return string(e) }
func (e policyError) Is(target error) bool { return target == ErrInvalidPolicy }

// Bounds on pin strings, matching the admin API's.
const (
	MaxLabelLen     = 200 // characters
	MaxVisitorIDLen = 200 // characters
)

func invalid(format string, args ...any) error {
	return policyError(fmt.Sprintf(format, args...))
}

// quote shortens s before it is echoed in an error, so a huge body does not
// come back in the answer.
func quote(s string) string {
	if len(s) > 40 {
		i := 40
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = s[:i] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// ParseSignal parses an ADMIN.md signal name (exact, lower case).
func ParseSignal(s string) (Signal, error) {
	for i := SignalNone + 1; i < numSignals; i++ {
		if signalNames[i] == s {
			return i, nil
		}
	}
	return SignalNone, invalid("signal %s must be one of %s", quote(s), strings.Join(signalNames[1:], ", "))
}

// ParseAction parses "allow", "review" or "block" (exact, lower case).
func ParseAction(s string) (Action, error) {
	for i := Allow; i <= Block; i++ {
		if actionNames[i] == s {
			return i, nil
		}
	}
	return ActionNone, invalid("action %s must be allow, review or block", quote(s))
}

// ParseRule parses one `{"signal", "action"}` element of the rules body.
func ParseRule(signal, action string) (Rule, error) {
	s, err := ParseSignal(signal)
	if err != nil {
		return Rule{}, err
	}
	a, err := ParseAction(action)
	if err != nil {
		return Rule{}, err
	}
	return Rule{Signal: s, Action: a}, nil
}

// ValidateRules checks a whole rule set: known signals and actions, and each
// signal at most once (two rules for one signal would be ambiguous to the
// person reading the set back).
func ValidateRules(rules []Rule) error {
	var seen SignalSet
	for i, r := range rules {
		if !r.Signal.Valid() {
			return invalid("rules[%d]: unknown signal", i)
		}
		if !r.Action.Valid() {
			return invalid("rules[%d]: unknown action", i)
		}
		if seen.Has(r.Signal) {
			return invalid("rules[%d]: signal %s appears twice", i, r.Signal)
		}
		seen.add(r.Signal)
	}
	return nil
}

// ParsePin parses one element of the exceptions body: exactly one of ip (an
// address or a CIDR) and visitorID, an action and an optional label. An
// IPv4-mapped IPv6 address or range is stored as IPv4, since visitors are
// matched on their unmapped address.
func ParsePin(ip, visitorID, action, label string) (Pin, error) {
	if ip != "" && strings.TrimSpace(ip) == "" {
		return Pin{}, invalid("ip is blank")
	}
	ip = strings.TrimSpace(ip)
	if (ip == "") == (visitorID == "") {
		return Pin{}, invalid("set exactly one of ip and visitor_id")
	}
	// A visitor pin matches device.visitor_id exactly: one with a space or
	// a control character in it could never match.
	if strings.IndexFunc(visitorID, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return Pin{}, invalid("visitor_id %s holds a space or control character; device.visitor_id never does", quote(visitorID))
	}
	a, err := ParseAction(action)
	if err != nil {
		return Pin{}, err
	}
	if utf8.RuneCountInString(label) > MaxLabelLen {
		return Pin{}, invalid("label is at most %d characters", MaxLabelLen)
	}
	if utf8.RuneCountInString(visitorID) > MaxVisitorIDLen {
		return Pin{}, invalid("visitor_id is at most %d characters", MaxVisitorIDLen)
	}
	p := Pin{VisitorID: visitorID, Action: a, Label: label}
	if ip != "" {
		pfx, ok := parsePinPrefix(ip)
		if !ok {
			return Pin{}, invalid("ip %s is not an IP address or CIDR", quote(ip))
		}
		p.Prefix = pfx
	}
	return p, nil
}

func parsePinPrefix(s string) (netip.Prefix, bool) {
	if strings.Contains(s, "/") {
		pfx, err := netip.ParsePrefix(s)
		if err != nil || pfx.Addr().Zone() != "" {
			return netip.Prefix{}, false
		}
		if pfx.Addr().Is4In6() && pfx.Bits() >= 96 {
			pfx = netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-96)
		}
		return pfx.Masked(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), true
}

// ValidatePins checks a whole pin set as Evaluate expects it: one target per
// pin, a known action, bounded strings, and no target twice (two pins for the
// same address or device would leave the reader guessing which applies).
func ValidatePins(pins []Pin) error {
	for i, p := range pins {
		if p.Prefix.IsValid() == (p.VisitorID != "") {
			return invalid("exceptions[%d]: set exactly one of ip and visitor_id", i)
		}
		if p.Prefix.IsValid() && p.Prefix != p.Prefix.Masked() {
			return invalid("exceptions[%d]: prefix has host bits set", i)
		}
		if !p.Action.Valid() {
			return invalid("exceptions[%d]: unknown action", i)
		}
		if utf8.RuneCountInString(p.Label) > MaxLabelLen || utf8.RuneCountInString(p.VisitorID) > MaxVisitorIDLen {
			return invalid("exceptions[%d]: label and visitor_id are at most %d characters", i, MaxLabelLen)
		}
		for j := range i {
			q := pins[j]
			if q.Prefix == p.Prefix && q.VisitorID == p.VisitorID {
				return invalid("exceptions[%d]: same target as exceptions[%d]", i, j)
			}
		}
	}
	return nil
}
