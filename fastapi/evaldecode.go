package fastapi

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unsafe"

	"github.com/bytedance/sonic"

	"github.com/fraudd/fraudd/actors/checks"
)

// jsonBody decodes the API's request bodies: encoding/json's reading
// (sonic.ConfigStd) with member names matched exactly. JSON names are
// case-sensitive, and CLARIFICATIONS ("Evaluate") ignores unknown fields:
// matched whatever their case, an unknown "Token":"" after "token"
// replaced it, and a Tor session came back allow.
var jsonBody = sonic.Config{
	EscapeHTML:       true,
	SortMapKeys:      true,
	CompactMarshaler: true,
	CopyString:       true,
	ValidateString:   true,
	CaseSensitive:    true,
}.Froze()

// errInvalidToken is the one token error clients see (SPEC 4.1).
var errInvalidToken = errors.New(checks.MsgInvalidToken)

// evalJSON mirrors the accepted JSON fields. Raw values let us tell null,
// string and wrong types apart, per field.
type evalJSON struct {
	Token              sonic.NoCopyRawMessage `json:"token"`
	Netcheck           sonic.NoCopyRawMessage `json:"netcheck"`
	FingerprintEventID sonic.NoCopyRawMessage `json:"fingerprintEventId"`
	ServiceFP          sonic.NoCopyRawMessage `json:"service_fp"`
	AccountID          sonic.NoCopyRawMessage `json:"accountId"`
	Email              sonic.NoCopyRawMessage `json:"email"`
	TZ                 sonic.NoCopyRawMessage `json:"tz"`
	ServiceTZ          sonic.NoCopyRawMessage `json:"service_tz"`
	GPUEvidence        sonic.NoCopyRawMessage `json:"gpuEvidence"`
	BrowserEvidence    sonic.NoCopyRawMessage `json:"browserEvidence"`
}

// bodyKind says how a Content-Type's body is read (SPEC 4.1).
type bodyKind uint8

const (
	bodyIgnored    bodyKind = iota // multipart and unknown types: not read
	bodyJSON                       // JSON object
	bodyJSONOrForm                 // form type: a JSON object, or form fields
)

func classifyContentType(ct []byte) bodyKind {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = bytes.TrimSpace(ct)
	// Lower-cased on the stack when it is short ASCII (every real client's
	// media type): bytes.ToLower returns a copy, an allocation per request.
	var buf [64]byte
	if len(ct) <= len(buf) && isASCII(ct) {
		for i, c := range ct {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			buf[i] = c
		}
		ct = buf[:len(ct)]
	} else {
		ct = bytes.ToLower(ct)
	}
	return classifyMediaType(ct)
}

// classifyMediaType classifies a lower-cased media type without parameters.
func classifyMediaType(ct []byte) bodyKind {
	switch {
	case len(ct) == 0, bytes.Equal(ct, []byte("application/json")), bytes.Equal(ct, []byte("text/plain")):
		return bodyJSON
	case bytes.HasPrefix(ct, []byte("application/")) && bytes.HasSuffix(ct, []byte("+json")):
		return bodyJSON
	case bytes.Equal(ct, []byte("application/x-www-form-urlencoded")):
		return bodyJSONOrForm
	default:
		return bodyIgnored
	}
}

// altTypesSince is when evaluate began to read a JSON object sent as
// text/plain, application/x-www-form-urlencoded, application/*+json or with
// no Content-Type (SPEC 4.1, §9); before, such a body was ignored.
var altTypesSince = time.Date(2026, 9, 28, 0, 0, 0, 0, time.UTC)

// evalBody is the evaluate body as read at now: before altTypesSince only an
// application/json body is read, any other is ignored (nil).
func evalBody(contentType, body []byte, now time.Time) []byte {
	if !now.Before(altTypesSince) {
		return body
	}
	ct := contentType
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	if !bytes.EqualFold(bytes.TrimSpace(ct), []byte("application/json")) {
		return nil
	}
	return body
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// decodeEvaluate reads an evaluate body into out; every string is copied out
// of the request buffer. A body that is absent, empty or of a type that is not
// read gives the zero request (the degraded path).
func decodeEvaluate(contentType, body []byte, out *checks.EvalRequest, j *evalJSON) error {
	*out = checks.EvalRequest{}
	kind := classifyContentType(contentType)
	trimmed := bytes.TrimSpace(body)
	if kind == bodyIgnored || len(trimmed) == 0 {
		return nil
	}
	if kind == bodyJSONOrForm && trimmed[0] != '{' {
		return decodeEvaluateForm(trimmed, out)
	}
	if trimmed[0] != '{' {
		return errors.New(checks.MsgBodyNotObject)
	}
	*j = evalJSON{}
	// A view of the body, not a copy: j's raw fields alias it, and every
	// value that leaves this function is copied (jsonString, bytes.Clone).
	if err := jsonBody.UnmarshalFromString(unsafe.String(unsafe.SliceData(trimmed), len(trimmed)), j); err != nil {
		return errors.New(checks.MsgBodyNotJSON)
	}
	tok := j.Token
	if isUnset(tok) {
		tok = j.Netcheck
	}
	if !isAbsent(tok) {
		s, ok := jsonString(tok)
		if !ok {
			return errInvalidToken
		}
		out.Token = s
	}
	var err error
	fp := j.FingerprintEventID
	if isUnset(fp) {
		fp = j.ServiceFP
	}
	if out.FingerprintEventID, err = stringField(fp, "fingerprintEventId"); err != nil {
		return err
	}
	if out.AccountID, err = stringField(j.AccountID, "accountId"); err != nil {
		return err
	}
	if out.Email, err = stringField(j.Email, "email"); err != nil {
		return err
	}
	out.EmailSent = !isAbsent(j.Email)
	tz := j.TZ
	if isUnset(tz) {
		tz = j.ServiceTZ
	}
	if out.TZ, err = stringField(tz, "tz"); err != nil {
		return err
	}
	out.TZSent = out.TZ != ""
	for _, ev := range []struct {
		raw  sonic.NoCopyRawMessage
		name string
		dst  *[]byte
	}{{j.GPUEvidence, "gpuEvidence", &out.GPUEvidence}, {j.BrowserEvidence, "browserEvidence", &out.BrowserEvidence}} {
		if isAbsent(ev.raw) {
			continue
		}
		if ev.raw[0] != '{' {
			return fmt.Errorf(checks.MsgFieldNotObject, ev.name)
		}
		*ev.dst = bytes.Clone(ev.raw)
	}
	return out.Normalize()
}

// decodeEvaluateForm reads token=…&fingerprintEventId=…&email=…&tz=… and the
// alias names; every value is a string.
func decodeEvaluateForm(body []byte, out *checks.EvalRequest) error {
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return errors.New(checks.MsgFormUnreadable)
	}
	first := func(names ...string) (string, bool) {
		for _, n := range names {
			if v, ok := vals[n]; ok && len(v) > 0 && v[0] != "" {
				return v[0], true
			}
		}
		return "", false
	}
	out.Token, _ = first("token", "netcheck")
	out.FingerprintEventID, _ = first("fingerprintEventId", "service_fp")
	out.AccountID, _ = first("accountId")
	out.Email, out.EmailSent = first("email")
	out.TZ, out.TZSent = first("tz", "service_tz")
	return out.Normalize()
}

func isAbsent(raw sonic.NoCopyRawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// isUnset: a field whose alias is read instead — absent, null or "", as the
// form body reads an empty field (SPEC 2.1 takes a missing, null or empty
// token alike).
func isUnset(raw sonic.NoCopyRawMessage) bool {
	return isAbsent(raw) || string(raw) == `""`
}

// jsonString unquotes a raw JSON string into a fresh Go string.
func jsonString(raw sonic.NoCopyRawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	// Fast path: no escapes; the conversion copies.
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	if err := jsonBody.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return strings.Clone(s), true
}

func stringField(raw sonic.NoCopyRawMessage, name string) (string, error) {
	if isAbsent(raw) {
		return "", nil
	}
	s, ok := jsonString(raw)
	if !ok {
		return "", fmt.Errorf(checks.MsgFieldNotString, name)
	}
	return s, nil
}
