package fastapi

import (
	"bytes"
	"errors"
	"net/netip"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/checks"
)

// handleLookup is GET /v1/lookup/{ip} (SPEC 4.2).
func (s *Server) handleLookup(ctx *fasthttp.RequestCtx, r *request) {
	out, ref := s.checks.Lookup(&r.Call, checks.PathTarget(r.param(0)))
	s.reply(ctx, r, out, ref)
}

// handleFreeLookup is POST /api/lookup (SPEC 4.7).
func (s *Server) handleFreeLookup(ctx *fasthttp.RequestCtx, r *request) {
	out, ref := s.checks.FreeLookup(&r.Call, readFreeIP(ctx.PostBody()))
	s.reply(ctx, r, out, ref)
}

// freeLookupBody is POST /api/lookup's body.
type freeLookupBody struct {
	IP sonic.NoCopyRawMessage `json:"ip"`
}

// readFreeIP reads the ip field of a free-lookup body: missing, not a string,
// or not a public address are distinct answers.
func readFreeIP(body []byte) checks.Target {
	var in freeLookupBody
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' || jsonBody.Unmarshal(body, &in) != nil || isAbsent(in.IP) {
		return checks.MissingIP()
	}
	raw, ok := jsonString(in.IP)
	if !ok {
		return checks.InvalidIP()
	}
	return checks.PastedTarget(raw)
}

// handleBulkLookup is POST /api/lookup-bulk (SPEC 4.8).
func (s *Server) handleBulkLookup(ctx *fasthttp.RequestCtx, r *request) {
	list, err := decodeBulk(ctx.PostBody())
	if err != nil {
		s.refuse(ctx, checks.Invalid(err.Error()))
		return
	}
	out, ref := s.checks.Bulk(&r.Call, &list)
	s.reply(ctx, r, out, ref)
}

// bulkBody is POST /api/lookup-bulk's body; email is deprecated and ignored.
type bulkBody struct {
	IPs []sonic.NoCopyRawMessage `json:"ips"`
}

var errBulkList = errors.New(checks.MsgBulkList)

// decodeBulk reads a bulk body. Duplicates, including two spellings of one
// address, are dropped silently (CLARIFICATIONS.md).
func decodeBulk(body []byte) (checks.BulkList, error) {
	var in bulkBody
	var out checks.BulkList
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' || jsonBody.Unmarshal(body, &in) != nil || in.IPs == nil {
		return out, errBulkList
	}
	seen := make(map[netip.Addr]struct{}, min(len(in.IPs), 64))
	for _, raw := range in.IPs {
		str, ok := jsonString(raw)
		if !ok {
			out.Invalid++
			continue
		}
		t := checks.PastedTarget(str)
		if !t.OK() {
			out.Invalid++
			continue
		}
		if _, dup := seen[t.Addr]; dup {
			continue
		}
		seen[t.Addr] = struct{}{}
		if len(out.Addrs) == checks.MaxBulk {
			out.NotChecked++
			continue
		}
		out.Addrs = append(out.Addrs, t.Addr)
	}
	return out, nil
}
