package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// adminCommand is one `fraudd admin` subcommand: an HTTP call to the admin API.
type adminCommand struct {
	name   string
	args   string // positional arguments, for usage
	help   string
	method string
	// path builds the URL path from the positional arguments.
	path func(pos []string) string
	// flags adds the command's own flags and returns a body builder.
	flags func(fs *flag.FlagSet) func() (any, error)
	npos  int
}

func idPath(suffix string) func([]string) string {
	return func(pos []string) string { return "/admin/v1/accounts/" + pos[0] + suffix }
}

// jsonFlag reads a JSON document given inline or as @file.
func jsonFlag(fs *flag.FlagSet, name, help string) func() (any, error) {
	v := fs.String(name, "", help+" (inline JSON or @file)")
	return func() (any, error) {
		s := *v
		if s == "" {
			return nil, fmt.Errorf("--%s is required", name)
		}
		if strings.HasPrefix(s, "@") {
			b, err := os.ReadFile(s[1:])
			if err != nil {
				return nil, err
			}
			s = string(b)
		}
		// Sent as given, not decoded and encoded again: a round trip through
		// any kept the last of two equal keys, turned 1e3 or 1.0 into 1000
		// or 1 and rounded integers past 2^53, so the server took what it
		// refuses (or stores otherwise) from the same body sent with curl.
		var out any
		if err := json.Unmarshal([]byte(s), &out); err != nil {
			return nil, fmt.Errorf("--%s: %w", name, err)
		}
		return json.RawMessage(s), nil
	}
}

var adminCommands = []adminCommand{
	{name: "create-account", help: "create an account and print its keys (shown once)", method: "POST",
		path: func([]string) string { return "/admin/v1/accounts" },
		flags: func(fs *flag.FlagSet) func() (any, error) {
			email := fs.String("email", "", "owner email (required)")
			plan := fs.String("plan", "free", "free, starter, growth, scale, custom or public_interest")
			created := fs.String("created-at", "", "RFC 3339 creation time (imports, grandfathering)")
			hourly := fs.String("hourly-limit", "", "custom plan: hourly limit or 'null'")
			monthly := fs.String("monthly-limit", "", "custom plan: monthly limit or 'null'")
			return func() (any, error) {
				if *email == "" {
					return nil, errors.New("--email is required")
				}
				body := map[string]any{"email": *email, "plan": *plan}
				if *created != "" {
					body["created_at"] = *created
				}
				for k, v := range map[string]string{"hourly_limit": *hourly, "monthly_limit": *monthly} {
					if v == "" {
						continue
					}
					if v == "null" {
						body[k] = nil
						continue
					}
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						return nil, fmt.Errorf("--%s: %w", strings.ReplaceAll(k, "_", "-"), err)
					}
					body[k] = n
				}
				return body, nil
			}
		}},
	{name: "get-account", args: "ID", npos: 1, help: "show an account (no secrets)", method: "GET", path: idPath("")},
	{name: "patch-account", args: "ID", npos: 1, help: "change plan, limits, suspended, allowlist, origins, device_evidence_beta", method: "PATCH", path: idPath(""),
		flags: func(fs *flag.FlagSet) func() (any, error) {
			return jsonFlag(fs, "json", `fields to change, e.g. '{"suspended": true}'`)
		}},
	{name: "rotate-live", args: "ID", npos: 1, help: "issue a new live key; the old one works 24 more hours", method: "POST", path: idPath("/keys/live/rotate")},
	{name: "revoke-previous", args: "ID", npos: 1, help: "end the previous live key's grace now", method: "POST", path: idPath("/keys/live/revoke-previous")},
	{name: "rotate-test", args: "ID", npos: 1, help: "replace the test key (the old one stops at once)", method: "POST", path: idPath("/keys/test/rotate")},
	{name: "get-rules", args: "ID", npos: 1, help: "show custom rules", method: "GET", path: idPath("/rules")},
	{name: "set-rules", args: "ID", npos: 1, help: "replace custom rules", method: "PUT", path: idPath("/rules"),
		flags: func(fs *flag.FlagSet) func() (any, error) {
			return jsonFlag(fs, "json", `rules, e.g. '[{"signal":"vpn","action":"block"}]'`)
		}},
	{name: "get-exceptions", args: "ID", npos: 1, help: "show exception pins", method: "GET", path: idPath("/exceptions")},
	{name: "set-exceptions", args: "ID", npos: 1, help: "replace exception pins", method: "PUT", path: idPath("/exceptions"),
		flags: func(fs *flag.FlagSet) func() (any, error) {
			return jsonFlag(fs, "json", `pins, e.g. '[{"ip":"203.0.113.0/24","action":"allow","label":"office"}]'`)
		}},
	{name: "set-webhook", args: "ID", npos: 1, help: "set the webhook URL (--url '' clears it)", method: "PUT", path: idPath("/webhook"),
		flags: func(fs *flag.FlagSet) func() (any, error) {
			u := fs.String("url", "", "https:// receiver (required); '' clears it")
			return func() (any, error) {
				// Required, even to clear: without it the call cleared the
				// webhook and exited 0, so `fraudd admin --url SERVER
				// set-webhook ID` (the server's URL taken for the
				// receiver's) or a forgotten flag silently stopped the
				// account's deliveries.
				given := false
				fs.Visit(func(f *flag.Flag) { given = given || f.Name == "url" })
				if !given {
					return nil, errors.New("--url is required: the receiver's https:// URL, or --url '' to clear it (the server's own --url goes before the command)")
				}
				if *u == "" {
					return map[string]any{"url": nil}, nil
				}
				return map[string]any{"url": *u}, nil
			}
		}},
	{name: "rotate-webhook-secret", args: "ID", npos: 1, help: "replace the webhook signing secret", method: "POST", path: idPath("/webhook/secret/rotate")},
	{name: "test-webhook", args: "ID", npos: 1, help: "send a test event", method: "POST", path: idPath("/webhook/test")},
	{name: "deliveries", args: "ID", npos: 1, help: "list recent webhook deliveries", method: "GET", path: idPath("/webhook/deliveries")},
	{name: "devices", args: "ID", npos: 1, help: "list recently seen devices", method: "GET", path: idPath("/devices")},
	{name: "mail", help: "show the mail outbox", method: "GET", path: func([]string) string { return "/admin/v1/mail" }},
	{name: "clock", help: "move the test clock (server started with --test-clock)", method: "POST",
		path: func([]string) string { return "/admin/v1/clock" },
		flags: func(fs *flag.FlagSet) func() (any, error) {
			adv := fs.String("advance", "", "Go duration or seconds to move forward")
			set := fs.String("set", "", "RFC 3339 time to jump to")
			return func() (any, error) {
				body := map[string]any{}
				if *adv != "" {
					body["advance"] = *adv
				}
				if *set != "" {
					body["set"] = *set
				}
				return body, nil
			}
		}},
}

func adminUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, "usage: fraudd admin [--url URL] [--admin-token T | --data-dir DIR] <command> [flags] [args]\n\ncommands:\n")
	for _, c := range adminCommands {
		fmt.Fprintf(w, "  %-25s %s\n", strings.TrimSpace(c.name+" "+c.args), c.help)
	}
	fmt.Fprint(w, "\nflags (before the command):\n")
	printFlags(w, fs, true)
	fmt.Fprint(w, "\nRun 'fraudd admin <command> -h' for a command's own flags.\n")
}

func runAdmin(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fraudd admin", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	base := new(string)
	*base = localAdminURL(osEnv())
	fs.Var(serverURL{base}, "url", "service base URL")
	var token string
	fs.Var(tokenValue{&token}, "admin-token", "operator token, surrounding whitespace trimmed")
	dataDir := "./data"
	fs.Var(dirValue{&dataDir}, "data-dir", "read the token from <data-dir>/admin-token when --admin-token is empty")
	if err := parseFlagsEnv(fs, args, osEnv()); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			adminUsage(stdout, fs)
			return 0
		}
		fmt.Fprintf(stderr, "fraudd admin: %v\nRun 'fraudd admin -h' for the commands and flags.\n", err)
		return 2
	}
	if fs.NArg() == 0 {
		adminUsage(stderr, fs)
		return 2
	}
	if a := fs.Arg(0); a == "help" {
		adminUsage(stdout, fs)
		return 0
	}
	var cmd *adminCommand
	for i := range adminCommands {
		if adminCommands[i].name == fs.Arg(0) {
			cmd = &adminCommands[i]
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "fraudd admin: unknown command %q\nRun 'fraudd admin -h' for the commands.\n", fs.Arg(0))
		return 2
	}
	cfs := flag.NewFlagSet("fraudd admin "+cmd.name, flag.ContinueOnError)
	cfs.SetOutput(io.Discard)
	var body func() (any, error)
	if cmd.flags != nil {
		body = cmd.flags(cfs)
	}
	var code int
	parseCmd := func(args []string) bool {
		err := cfs.Parse(args)
		if err == nil {
			return true
		}
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "usage: fraudd admin %s\n\n%s (%s %s)\n", strings.TrimSpace(cmd.name+" [flags] "+cmd.args), cmd.help, cmd.method, cmd.path(placeholders(cmd)))
			if cmd.flags != nil {
				fmt.Fprint(stdout, "\nflags:\n")
				printFlags(stdout, cfs, false)
			}
			code = 0
			return false
		}
		// A flag of fraudd admin itself after the command (`get-account ID
		// --admin-token T`) is not the command's: say where it goes rather
		// than only that it is not defined.
		if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok && fs.Lookup(name) != nil {
			fmt.Fprintf(stderr, "fraudd admin %s: --%s is a flag of fraudd admin: give it before the command (fraudd admin --%s … %s)\n", cmd.name, name, name, cmd.name)
			code = 2
			return false
		}
		fmt.Fprintf(stderr, "fraudd admin %s: %v\nRun 'fraudd admin %s -h' for its flags.\n", cmd.name, err, cmd.name)
		code = 2
		return false
	}
	if !parseCmd(fs.Args()[1:]) {
		return code
	}
	// Positional arguments may come before or after the flags. What follows
	// them is parsed for a command without flags too, so that a flag there
	// (`get-account ID --bogus`) is refused by name rather than counted as
	// an extra argument ("want 1 argument(s): ID" when the ID was given).
	pos := cfs.Args()
	if len(pos) > cmd.npos {
		if !parseCmd(pos[cmd.npos:]) {
			return code
		}
		pos = append(pos[:cmd.npos:cmd.npos], cfs.Args()...)
	}
	if len(pos) > cmd.npos {
		if cmd.npos == 0 {
			// "(want 0 argument(s): )" said it in a broken sentence.
			fmt.Fprintf(stderr, "fraudd admin %s: unexpected argument %q (it takes none)\n", cmd.name, pos[cmd.npos])
			return 2
		}
		fmt.Fprintf(stderr, "fraudd admin %s: unexpected argument %q (want %d argument(s): %s)\n", cmd.name, pos[cmd.npos], cmd.npos, cmd.args)
		return 2
	}
	if len(pos) != cmd.npos {
		fmt.Fprintf(stderr, "fraudd admin %s: want %d argument(s): %s\n", cmd.name, cmd.npos, cmd.args)
		return 2
	}
	for _, id := range pos {
		if err := checkPathArg(id); err != nil {
			fmt.Fprintf(stderr, "fraudd admin %s: %v\n", cmd.name, err)
			return 2
		}
	}
	tok, err := adminToken(token, dataDir)
	if err != nil {
		fmt.Fprintf(stderr, "fraudd admin: %v\n", err)
		return 2
	}
	var payload []byte
	if body != nil {
		v, err := body()
		if err != nil {
			fmt.Fprintf(stderr, "fraudd admin %s: %v\n", cmd.name, err)
			return 2
		}
		payload, _ = json.Marshal(v)
	}
	status, out, err := callAdmin(*base, tok, cmd.method, cmd.path(pos), payload, 30*time.Second)
	if err != nil {
		fmt.Fprintf(stderr, "fraudd admin: %v\n", err)
		return 1
	}
	if noAdminAPI(status, out) {
		fmt.Fprintf(stderr, "fraudd admin %s: %s\n", cmd.name, noAdminAPIHint(*base))
		return 1
	}
	if cmd.name == "clock" && status == http.StatusNotFound {
		fmt.Fprintf(stderr, "fraudd admin clock: the server at %s runs without --test-clock, so its clock cannot be moved (start it with 'fraudd serve --test-clock', for tests only)\n", *base)
		return 1
	}
	if status >= 300 {
		fmt.Fprintf(stderr, "fraudd admin %s: %s\n", cmd.name, errorLine(status, out))
		return 1
	}
	if cmd.name == "create-account" {
		fmt.Fprintln(stderr, "Keep these secrets now: the live, test and webhook secrets are not shown again.")
	}
	stdout.Write(out)
	return 0
}

// noAdminAPI says whether an answer is the bare 404 of a listener that
// serves no admin API: the public one of a server started with
// --admin-addr (README Operator console: it answers 404 for the admin API)
// or another service. The admin API's own 404s say what was not found
// ("Account not found.") or why (the test clock's hint).
func noAdminAPI(status int, body []byte) bool {
	if status != http.StatusNotFound {
		return false
	}
	var e struct {
		Error string `json:"error"`
		Hint  string `json:"hint"`
	}
	return json.Unmarshal(body, &e) == nil && e.Error == "Not found." && e.Hint == ""
}

// noAdminAPIHint is the refusal of a call noAdminAPI answered: "Not found.
// (HTTP 404)" alone read as if the account or the command were missing,
// where --url most likely names the public listener.
func noAdminAPIHint(base string) string {
	return fmt.Sprintf("%s serves no admin API (HTTP 404 Not found.): a server started with --admin-addr serves it on that address only; give it as --url", base)
}

// checkPathArg refuses a positional argument that is not one path segment.
// It is pasted into the URL path, and the server reads the path as the
// router does (an empty segment at the end is dropped, "." and ".." are
// resolved, %2F is a slash): get-account "" would list every account and
// get-account ../mail print the outbox, both with exit status 0, instead of
// the one account's 404. Account IDs (acc_ and letters and digits) never
// need escaping, so anything that would is refused rather than escaped.
func checkPathArg(id string) error {
	if id == "" || id == "." || id == ".." || url.PathEscape(id) != id {
		return fmt.Errorf("%q is not an account ID (acc_…)", id)
	}
	return nil
}

// errorLine is a refused call's report on one line: the API's error, its
// code and hint (ADMIN.md: {"error", "code"?, "hint"?}), and the status; a
// body that is not such JSON is shown with its line breaks folded.
func errorLine(status int, body []byte) string {
	var e struct {
		Error json.RawMessage `json:"error"`
		Code  string          `json:"code"`
		Hint  string          `json:"hint"`
	}
	var msg string
	if json.Unmarshal(body, &e) == nil && json.Unmarshal(e.Error, &msg) == nil && msg != "" {
		line := fmt.Sprintf("%s (HTTP %d", msg, status)
		if e.Code != "" {
			line += ", code " + e.Code
		}
		line += ")"
		if e.Hint != "" {
			line += " " + e.Hint
		}
		return line
	}
	if text := strings.Join(strings.Fields(string(body)), " "); text != "" {
		return fmt.Sprintf("HTTP %d: %s", status, text)
	}
	return fmt.Sprintf("HTTP %d", status)
}

// adminToken is the operator token: the flag's or env's value (trimmed and
// checked by tokenValue), else the data dir's admin-token file, trimmed as
// serve reads it.
func adminToken(flagValue, dataDir string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	path := filepath.Join(dataDir, "admin-token")
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("no --admin-token and cannot read %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("no --admin-token and %s is empty", path)
	}
	return tok, nil
}

// callAdmin makes one operator API call and returns the status and the
// body, indented when it is JSON.
func callAdmin(base, tok, method, path string, payload []byte, timeout time.Duration) (int, []byte, error) {
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequest(method, strings.TrimRight(base, "/")+path, body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("User-Agent", "fraudd-admin/"+version)
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	var pretty bytes.Buffer
	if json.Indent(&pretty, out, "", "  ") == nil {
		out = append(pretty.Bytes(), '\n')
	}
	return resp.StatusCode, out, nil
}

// placeholders fills a command's positional arguments with their names, for help.
func placeholders(c *adminCommand) []string {
	p := strings.Fields(c.args)
	for len(p) < c.npos {
		p = append(p, "ARG")
	}
	return p
}
