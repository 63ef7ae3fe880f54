package webhook

import (
	"errors"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/fraudd/fraudd/intel/ipaddr"
)

// CheckURL validates a receiver URL as the admin API accepts it
// (CLARIFICATIONS.md): an absolute https:// URL on a public address. With
// allowPrivate (development and tests) http:// and loopback or private
// addresses are accepted too. A host name is checked again at every
// connection, against the addresses it resolves to. It returns the URL in
// canonical form.
func CheckURL(raw string, allowPrivate bool) (string, error) {
	raw = strings.TrimSpace(raw)
	// A space or control byte inside a URL is sent encoded (%20): raw, the
	// URL it names is not the one its canonical form reads back as.
	if strings.ContainsFunc(raw, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", errURLShape(allowPrivate)
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Opaque != "" {
		return "", errURLShape(allowPrivate)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	switch u.Scheme {
	case "https":
	case "http":
		if !allowPrivate {
			return "", errors.New("url must use https:// (http:// only with --allow-private-webhooks)")
		}
	default:
		return "", errURLShape(allowPrivate)
	}
	host := u.Hostname()
	if host == "" {
		return "", errURLShape(allowPrivate)
	}
	// url.Parse checks only that a port is digits: 0 or one past 65535
	// would be stored and every delivery then fail to dial ("invalid
	// port"), with nothing said when the receiver was set. An empty port
	// ("host:") is the scheme's default.
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", errors.New("url's port must be from 1 to 65535")
		}
	}
	if !allowPrivate && !publicHost(host) {
		return "", errors.New("url must be on a public address (loopback and private addresses only with --allow-private-webhooks)")
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String(), nil
}

func errURLShape(allowPrivate bool) error {
	if allowPrivate {
		return errors.New("url must be an absolute https:// or http:// URL, or null")
	}
	return errors.New("url must be an absolute https:// URL, or null")
}

// publicHost reports whether host may be public: an address literal must be
// globally reachable; a name must not be one that only ever means this
// machine or the local network.
func publicHost(host string) bool {
	if a, err := netip.ParseAddr(host); err == nil {
		return ipaddr.IsPublic(a.Unmap())
	}
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if h == "localhost" || !strings.Contains(h, ".") {
		return false
	}
	for _, suffix := range []string{".localhost", ".local", ".internal", ".home.arpa"} {
		if strings.HasSuffix(h, suffix) {
			return false
		}
	}
	return true
}

// chat is the kind of receiver a URL names.
type chat uint8

const (
	chatNone chat = iota
	chatSlack
	chatDiscord
)

// chatOf recognises Slack and Discord incoming-webhook URLs, which get a
// formatted message instead of the raw JSON (SPEC §6).
func chatOf(raw string) chat {
	u, err := url.Parse(raw)
	if err != nil {
		return chatNone
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	switch {
	case host == "hooks.slack.com" || host == "hooks.slack-gov.com": // GovSlack's own host
		return chatSlack
	case (host == "discord.com" || host == "discordapp.com" || strings.HasSuffix(host, ".discord.com")) &&
		discordWebhookPath(u.Path):
		// Discord's Slack-compatible endpoint (…/slack) reads Slack's body.
		if strings.HasSuffix(u.Path, "/slack") {
			return chatSlack
		}
		return chatDiscord
	}
	return chatNone
}

// discordWebhookPath reports whether path is a Discord webhook's, with or
// without the API version Discord accepts in it: /api/webhooks/… and
// /api/v10/webhooks/… name the same webhook.
func discordWebhookPath(path string) bool {
	rest, ok := strings.CutPrefix(path, "/api/")
	if !ok {
		return false
	}
	if v, after, found := strings.Cut(rest, "/"); found && len(v) > 1 && v[0] == 'v' &&
		strings.Trim(v[1:], "0123456789") == "" {
		rest = after
	}
	return strings.HasPrefix(rest, "webhooks/")
}
