package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/fraudd/fraudd/actors/mailer"
	"github.com/fraudd/fraudd/fastapi"
	"github.com/fraudd/fraudd/storage"
)

// envPrefix names the environment fallback of every top-level flag:
// --feeds-refresh is read from FRAUDD_FEEDS_REFRESH.
const envPrefix = "FRAUDD_"

func envKey(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlagsEnv parses args, then gives every flag the command line left
// unset its FRAUDD_* variable through the flag's own Set, so a variable is
// held to exactly the forms the flag accepts. A value that does not parse is
// an error naming the variable and the accepted forms, never a silent
// default: an operator who wrote FRAUDD_EDGE_BLOCK=off meant something.
//
// We do not use ff/v4 for this: its only release is an alpha, and given a
// standard FlagSet it swaps in its own getopt parser (single-dash long flags
// stop working) and reports env errors without the accepted forms.
func parseFlagsEnv(fs *flag.FlagSet, args []string, env envVars) error {
	if err := fs.Parse(args); err != nil {
		// The standard message names the flag but not what it takes.
		if m := invalidFlagRE.FindStringSubmatch(err.Error()); m != nil {
			if f := fs.Lookup(m[2]); f != nil {
				if isSecret(f) {
					return fmt.Errorf("--%s is not valid (%s); accepted: %s", m[2], flagErr(errors.New(m[3])), accepted(f))
				}
				return fmt.Errorf("--%s=%s is not valid (%s); accepted: %s", m[2], m[1], flagErr(errors.New(m[3])), accepted(f))
			}
		}
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if !given[f.Name] {
			errs = append(errs, setFromEnv(fs, f, env))
		}
	})
	return errors.Join(errs...)
}

// envFallback gives one flag the command line left unset its FRAUDD_*
// variable, held to the same forms and reported as parseFlagsEnv does, for
// a command whose other flags have no variable (fraudd feeds). Call it
// after fs.Parse.
func envFallback(fs *flag.FlagSet, name string, env envVars) error {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	if given {
		return nil
	}
	return setFromEnv(fs, fs.Lookup(name), env)
}

// setFromEnv sets f from its variable when that is set; a value f refuses
// is an error naming the variable and the accepted forms (the value too,
// unless it is a secret).
func setFromEnv(fs *flag.FlagSet, f *flag.Flag, env envVars) error {
	key := envKey(f.Name)
	v, ok := env.lookup(key)
	if !ok {
		return nil
	}
	if err := fs.Set(f.Name, v); err != nil {
		if isSecret(f) {
			return fmt.Errorf("%s is not valid (%v); accepted: %s", key, flagErr(err), accepted(f))
		}
		return fmt.Errorf("%s=%q is not valid (%v); accepted: %s", key, v, flagErr(err), accepted(f))
	}
	return nil
}

// isSecret says whether a flag's value is a secret (tokenValue): a refusal
// names the flag or variable but never echoes the value into a log.
func isSecret(f *flag.Flag) bool {
	s, ok := f.Value.(interface{ Secret() bool })
	return ok && s.Secret()
}

var invalidFlagRE = regexp.MustCompile(`^invalid (?:boolean )?value (".*") for (?:flag )?-([\w-]+): (.*)$`)

// unknownEnv lists the FRAUDD_* variables in environ that name no flag of fs
// (nor one of except): most likely a misspelling that would otherwise be
// silently ignored.
func unknownEnv(fs *flag.FlagSet, env envVars, except ...string) []string {
	known := map[string]bool{}
	for _, e := range except {
		known[e] = true
	}
	fs.VisitAll(func(f *flag.Flag) { known[envKey(f.Name)] = true })
	var out []string
	for k := range env {
		if strings.HasPrefix(k, envPrefix) && !known[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// flagErr drops the standard library's uninformative "parse error" wrapper.
func flagErr(err error) string {
	s := err.Error()
	if s == "parse error" || s == "invalid syntax" {
		return "does not parse"
	}
	return s
}

// formsOf describes what a flag accepts, for error messages and help.
type formsOf interface{ Forms() string }

// accepted names the forms a flag's value accepts.
func accepted(f *flag.Flag) string {
	if v, ok := f.Value.(formsOf); ok {
		return v.Forms()
	}
	switch kindOf(f) {
	case "bool":
		return "true or false (also 1/0, t/f, TRUE/FALSE)"
	case "duration":
		// No "0 = off" here: what 0 means is the flag's own (none of
		// fraudd's time limits takes it; offDuration says so where it does).
		return "a Go duration with a unit, e.g. 6h, 90m or 30s"
	case "int":
		return "a whole number"
	}
	return "any string"
}

// kindOf names a flag's value type for help: bool, duration, int or string.
func kindOf(f *flag.Flag) string {
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "bool"
	}
	if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case time.Duration:
			return "duration"
		case int, int64, uint, uint64:
			return "int"
		}
	}
	if k, ok := f.Value.(interface{ Kind() string }); ok {
		return k.Kind()
	}
	return "string"
}

// printFlags writes a flag set's help: every flag with its type, default and
// environment variable, booleans shown as booleans. withEnv is false for
// subcommand flags, which have no environment fallback.
func printFlags(w io.Writer, fs *flag.FlagSet, withEnv bool) {
	fs.VisitAll(func(f *flag.Flag) {
		kind := kindOf(f)
		head := "  --" + f.Name
		if kind == "bool" {
			head += "[=true|false]"
		} else {
			head += " " + kind
		}
		var notes []string
		if d := f.DefValue; d != "" && !isZeroDefault(f) {
			notes = append(notes, "default "+d)
		}
		if withEnv {
			notes = append(notes, "env "+envKey(f.Name))
		}
		fmt.Fprintln(w, head)
		usage := f.Usage
		if len(notes) > 0 {
			usage += " (" + strings.Join(notes, ", ") + ")"
		}
		fmt.Fprintf(w, "        %s\n", usage)
	})
}

func isZeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "false", "0", "0s":
		return true
	}
	return false
}

// prefixList is a comma-separated list of IPs and CIDRs (--trusted-proxies);
// a bare IP is its own /32 or /128.
type prefixList []netip.Prefix

func (p *prefixList) String() string {
	if p == nil {
		return ""
	}
	s := make([]string, len(*p))
	for i, pr := range *p {
		s[i] = pr.String()
	}
	return strings.Join(s, ",")
}

func (p *prefixList) Set(v string) error {
	var out prefixList
	for _, part := range splitList(v) {
		pr, err := netip.ParsePrefix(part)
		if err != nil {
			a, aerr := netip.ParseAddr(part)
			if aerr != nil {
				return fmt.Errorf("%q is not an IP or CIDR", part)
			}
			pr = netip.PrefixFrom(a.WithZone(""), a.BitLen())
		}
		// An IPv4-mapped entry is its IPv4 form: peers are compared
		// unmapped, so ::ffff:10.0.0.1 kept as IPv6 would hold no proxy.
		if a := pr.Addr(); a.Is4In6() && pr.Bits() >= 96 {
			pr = netip.PrefixFrom(a.Unmap(), pr.Bits()-96)
		}
		out = append(out, pr.Masked())
	}
	*p = out
	return nil
}

func (p *prefixList) Forms() string {
	return "comma-separated IPs or CIDRs, e.g. 10.0.0.0/8,192.0.2.7 (empty = none)"
}

func (p *prefixList) Kind() string { return "cidrs" }

// hostPort is an address flag, host:port. Its zero rules are those of an
// address other nodes dial (--cluster-advertise): a host, and a port from 1
// up. The options relax them for what listens.
type hostPort struct {
	s *string
	// anyHost: the host may be empty (":8090", every interface).
	anyHost bool
	// listen: a listen address (--addr and the optional listeners): the
	// host may be empty, and port 0 asks the kernel for a free one.
	listen bool
	// optional: empty is accepted and turns the listener off.
	optional bool
}

func (v hostPort) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}

func (v hostPort) Set(s string) error {
	if s != "" || !v.optional {
		if err := checkHostPort(s, v.anyHost || v.listen, v.listen); err != nil {
			return err
		}
	}
	*v.s = s
	return nil
}

// checkHostPort checks host:port; the host may be empty with anyHost, and
// the port 0 with anyPort. An empty port is refused either way: Go reads
// "127.0.0.1:" as port 0, so a listener would come up on a random port when
// the operator most likely lost the port to a shell variable; 0 says so.
func checkHostPort(s string, anyHost, anyPort bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("not host:port")
	}
	if host == "" && !anyHost {
		return errors.New("the host is empty")
	}
	if port == "" {
		return errors.New("the port is empty")
	}
	if n, err := net.LookupPort("tcp", port); err != nil || (n == 0 && !anyPort) {
		return errors.New("bad port")
	}
	return nil
}

func (v hostPort) Forms() string {
	switch {
	case v.listen && v.optional:
		return "host:port or :port, e.g. 127.0.0.1:6060 (empty = off)"
	case v.listen:
		return "host:port or :port, e.g. :8080 or 127.0.0.1:8080"
	case v.anyHost:
		return "host:port or :port, e.g. :8090"
	}
	return "host:port, e.g. node1.internal:8090"
}

func (v hostPort) Kind() string { return "addr" }

// dirValue is --data-dir: a directory path. Empty is refused: it names no
// directory (serve stopped on a bare `mkdir : no such file or directory`
// naming neither the flag nor the variable, and the admin, backup and feeds
// commands looked in the working directory), and FRAUDD_DATA_DIR= set to
// nothing most likely lost its value to the shell or a compose file.
// Surrounding whitespace or a control character is refused too: it is a
// newline or blank a value from a file or a manifest kept, and taken as it
// is it names another directory, so serve created "/var/lib/fraudd\n" and
// came up empty beside the real store, every key answering 401. Refused,
// not trimmed: a real directory could end in a blank, and guessing which
// one was meant is how a service starts on the wrong store.
type dirValue struct{ s *string }

func (v dirValue) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}

func (v dirValue) Set(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	if err := checkDirPath(s); err != nil {
		return err
	}
	*v.s = s
	return nil
}

// checkDirPath refuses a directory path with surrounding whitespace or a
// control character (dirValue says why).
func checkDirPath(s string) error {
	if strings.TrimSpace(s) != s {
		return errors.New("surrounding whitespace")
	}
	if strings.ContainsFunc(s, unicode.IsControl) {
		return errors.New("a control character inside")
	}
	return nil
}

// optionalDirValue is a directory path whose empty value means a default
// (--cluster-etcd-dir: <data-dir>/etcd), checked as dirValue is: an
// embedded etcd member started on "<dir>\n" came up as a new member with an
// empty store beside its own.
type optionalDirValue struct{ s *string }

func (v optionalDirValue) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}

func (v optionalDirValue) Set(s string) error {
	if err := checkDirPath(s); err != nil {
		return err
	}
	*v.s = s
	return nil
}

func (v optionalDirValue) Forms() string {
	return "a directory path without surrounding whitespace or control characters; empty = the default"
}

func (v optionalDirValue) Kind() string { return "dir" }

func (v dirValue) Forms() string {
	return "a directory path without surrounding whitespace or control characters, e.g. ./data or /var/lib/fraudd"
}

func (v dirValue) Kind() string { return "dir" }

// tokenValue is --admin-token: the operator token, sent and compared as a
// bearer token. Surrounding whitespace is trimmed, as it is from the
// admin-token file (written with a newline), so a token copied from that
// file with its newline still matches. Whitespace or a control character
// inside could never be sent in an Authorization header, and a value that
// was only whitespace is a mistake, not a request for the file: both are
// refused. Empty is the default: the token in <data-dir>/admin-token.
type tokenValue struct{ s *string }

func (v tokenValue) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}

func (v tokenValue) Set(s string) error {
	t := strings.TrimSpace(s)
	if t == "" && s != "" {
		return errors.New("only whitespace")
	}
	if strings.ContainsFunc(t, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return errors.New("whitespace or a control character inside")
	}
	*v.s = t
	return nil
}

func (v tokenValue) Forms() string {
	return "one word without whitespace or control characters (surrounding whitespace is trimmed); empty = the token in <data-dir>/admin-token"
}

func (v tokenValue) Kind() string { return "token" }

// Secret keeps the value out of refusals (isSecret).
func (v tokenValue) Secret() bool { return true }

// secretValue is --secret: the master secret. Surrounding whitespace is
// trimmed, as it is from the master-secret file, so that the file's content
// given as the value (a Kubernetes secret mounted from the file keeps its
// newline) is the same secret as the file, not another one that the store
// refuses as "not the one it was written with". A value that was only
// whitespace is a mistake, not a secret: before, "   " became the master
// secret of a new store. Empty is the default: <data-dir>/master-secret.
// raw keeps the value as given (loadMaster: stores of earlier builds).
type secretValue struct{ s, raw *string }

func (v secretValue) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}

func (v secretValue) Set(s string) error {
	t := strings.TrimSpace(s)
	if t == "" && s != "" {
		return errors.New("only whitespace")
	}
	*v.s, *v.raw = t, s
	return nil
}

func (v secretValue) Forms() string {
	return "any value not only whitespace (surrounding whitespace is trimmed); empty = the secret in <data-dir>/master-secret"
}

func (v secretValue) Kind() string { return "secret" }

// Secret keeps the value out of refusals (isSecret).
func (v secretValue) Secret() bool { return true }

// stringList is a comma-separated list of strings.
type stringList []string

func (l *stringList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

func (l *stringList) Set(v string) error { *l = splitList(v); return nil }

func (l *stringList) Kind() string { return "list" }

// agentList is --edge-block-agents: User-Agent prefixes the edge block
// refuses. CLARIFICATIONS ("Auth") has curl, browsers and Go's net/http
// default never blocked, so an entry that would match one of theirs
// ("curl/", "Mozilla", "Go-http-client/1.1", "c") is refused rather than
// taken: with it the block would refuse the clients it promises to let by.
type agentList struct{ l *[]string }

// neverBlocked are the User-Agent beginnings of the clients the edge block
// never refuses.
var neverBlocked = []string{"curl/", "Mozilla/", "Go-http-client/"}

func (a agentList) String() string {
	if a.l == nil {
		return ""
	}
	return strings.Join(*a.l, ",")
}

func (a agentList) Set(v string) error {
	l := splitList(v)
	for _, e := range l {
		for _, ua := range neverBlocked {
			if strings.HasPrefix(ua, e) || strings.HasPrefix(e, ua) {
				return fmt.Errorf("%q would block %s…, which is never blocked", e, ua)
			}
		}
	}
	*a.l = l
	return nil
}

func (a agentList) Forms() string {
	return "comma-separated User-Agent prefixes, none matching curl/, Mozilla/ or Go-http-client/ (never blocked); empty = none"
}

func (a agentList) Kind() string { return "list" }

// smtpValue is --smtp-url, checked as it is read, so that a wrong one stops
// the start naming the flag before the store is opened.
type smtpValue struct{ s *string }

func (v smtpValue) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}

func (v smtpValue) Set(s string) error {
	if s != "" {
		if _, err := mailer.ParseSMTPURL(s); err != nil {
			return errors.New("does not parse")
		}
	}
	*v.s = s
	return nil
}

func (v smtpValue) Forms() string {
	return "smtp://[user:pass@]host:port[?from=addr]; empty = record mail in the outbox only"
}

func (v smtpValue) Kind() string { return "url" }

// Secret keeps the value (its password) out of refusals (isSecret).
func (v smtpValue) Secret() bool { return true }

// originList is --mcp-origins: browser origins, canonicalised.
type originList struct{ l *[]string }

func (o originList) String() string {
	if o.l == nil {
		return ""
	}
	return strings.Join(*o.l, ",")
}

func (o originList) Set(v string) error {
	l, err := fastapi.ParseMCPOrigins(splitList(v))
	if err != nil {
		return err
	}
	*o.l = l
	return nil
}

func (o originList) Forms() string {
	return "comma-separated origins like https://agent.example (empty = none)"
}

func (o originList) Kind() string { return "origins" }

// serverURL is the --url of the commands that call a running server
// (admin, backup, health): its base URL, http(s)://host[:port] with an
// optional path prefix (a reverse proxy's). Checked as it is read: a URL
// without its scheme (`--url 127.0.0.1:8081`, the form --addr takes) or
// empty failed only when the call was made, exit 1, on Go's "Get
// \"127.0.0.1:8081/admin/v1/…\": first path segment in URL cannot contain
// colon", naming neither the flag nor what it takes.
type serverURL struct{ s *string }

func (v serverURL) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}

func (v serverURL) Set(s string) error {
	u, err := url.Parse(s)
	switch {
	case s == "":
		return errors.New("empty")
	case !strings.Contains(s, "://"):
		return errors.New("no http:// or https:// in front")
	case err != nil:
		return errors.New("does not parse")
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("not http:// or https://")
	case u.Host == "" || u.Hostname() == "":
		return errors.New("no host")
	case u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return errors.New("a user, query or fragment, which a base URL has none of")
	}
	if err := checkHostPort(net.JoinHostPort(u.Hostname(), cmpPort(u)), false, false); err != nil {
		return err
	}
	*v.s = s
	return nil
}

// cmpPort is u's port, or its scheme's.
func cmpPort(u *url.URL) string {
	if p := u.Port(); p != "" || strings.HasSuffix(u.Host, ":") {
		return p
	}
	return u.Scheme
}

func (v serverURL) Forms() string {
	return "http(s)://host[:port], e.g. http://127.0.0.1:8080"
}

func (v serverURL) Kind() string { return "url" }

// durabilityValue is --durability.
type durabilityValue struct{ d *storage.Durability }

func (v durabilityValue) String() string {
	if v.d == nil {
		return storage.Interval.String()
	}
	return v.d.String()
}

func (v durabilityValue) Set(s string) error {
	d, err := storage.ParseDurability(s)
	if err != nil {
		return errors.New("unknown mode")
	}
	*v.d = d
	return nil
}

func (v durabilityValue) Forms() string { return "interval or strict" }

func (v durabilityValue) Kind() string { return "mode" }

// syncIntervalValue is --sync-interval: a duration from 1ms to 10s.
type syncIntervalValue struct{ d *time.Duration }

func (v syncIntervalValue) String() string {
	if v.d == nil {
		return storage.DefaultSyncInterval.String()
	}
	return v.d.String()
}

func (v syncIntervalValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "time: "))
	}
	if d < time.Millisecond || d > 10*time.Second {
		return errors.New("out of range")
	}
	*v.d = d
	return nil
}

func (v syncIntervalValue) Get() any { return *v.d }

func (v syncIntervalValue) Forms() string { return "a Go duration from 1ms to 10s, e.g. 10ms" }

func (v syncIntervalValue) Kind() string { return "duration" }

// levelValue is --log-level.
type levelValue struct{ l *slog.Level }

func (v levelValue) String() string {
	if v.l == nil {
		return slog.LevelInfo.String()
	}
	return strings.ToLower(v.l.String())
}

// Set takes the four levels the help lists, in any case. slog's own
// parser also takes offsets ("info+2", "DEBUG-4"), an undocumented level
// between or beyond the four that filtered lines as none of them does: a
// typo's "info+" away from a start that hides the INFO lines.
func (v levelValue) Set(s string) error {
	var l slog.Level
	switch strings.ToLower(s) {
	case "debug":
		l = slog.LevelDebug
	case "info":
		l = slog.LevelInfo
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		return errors.New("unknown level")
	}
	*v.l = l
	return nil
}

func (v levelValue) Forms() string { return "debug, info, warn or error" }

func (v levelValue) Kind() string { return "level" }

// offDuration is a duration where 0 means off and negatives are refused.
type offDuration struct{ d *time.Duration }

func (o offDuration) String() string {
	if o.d == nil {
		return "0s"
	}
	return o.d.String()
}

func (o offDuration) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "time: "))
	}
	if d < 0 {
		return errors.New("negative")
	}
	if d > 0 && d < minFeedsRefresh {
		// Each refresh downloads every feed from its upstream: a typo such
		// as 6s would fetch them back to back all day.
		return fmt.Errorf("under %v", minFeedsRefresh)
	}
	*o.d = d
	return nil
}

// minFeedsRefresh is the shortest --feeds-refresh interval.
const minFeedsRefresh = time.Minute

func (o offDuration) Get() any { return *o.d }

func (o offDuration) Forms() string {
	return "a Go duration with a unit, 1m or more, e.g. 6h or 90m; 0 = off"
}

func (o offDuration) Kind() string { return "duration" }

// positiveDuration is a time limit (fraudd health --timeout, fraudd feeds
// update --timeout): above 0, as fraudd's limits are. 0 is no "off": an
// http.Client reads it as no limit at all, so a HEALTHCHECK against a hung
// server would hang with it, and a context's 0 is over before it begins.
type positiveDuration struct{ d *time.Duration }

func (v positiveDuration) String() string {
	if v.d == nil {
		return "0s"
	}
	return v.d.String()
}

func (v positiveDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "time: "))
	}
	if d <= 0 {
		return errors.New("not above 0")
	}
	*v.d = d
	return nil
}

func (v positiveDuration) Get() any { return *v.d }

func (v positiveDuration) Forms() string { return "a Go duration above 0, e.g. 3s or 500ms" }

func (v positiveDuration) Kind() string { return "duration" }

// envVars is an environment: the process's (osEnv) or a test's.
type envVars map[string]string

func osEnv() envVars {
	e := envVars{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		e[k] = v
	}
	return e
}

func (e envVars) lookup(k string) (string, bool) { v, ok := e[k]; return v, ok }

// helpError is -h or --help: the caller prints fs's help to stdout and exits 0.
type helpError struct{ fs *flag.FlagSet }

func (helpError) Error() string { return "help requested" }
