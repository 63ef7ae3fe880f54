package bench

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// FloorRoute says which body size the floor server answers on a path prefix.
type FloorRoute struct {
	Prefix string
	Size   int
}

// FormatFloorRoutes writes routes as the floor-server's --routes value:
// "PREFIX=SIZE,PREFIX=SIZE".
func FormatFloorRoutes(rs []FloorRoute) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.Prefix + "=" + strconv.Itoa(r.Size)
	}
	return strings.Join(parts, ",")
}

// ParseFloorRoutes reads FormatFloorRoutes' form.
func ParseFloorRoutes(s string) ([]FloorRoute, error) {
	var rs []FloorRoute
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		i := strings.LastIndexByte(item, '=')
		if i <= 0 {
			return nil, fmt.Errorf("floor route %q: want PREFIX=SIZE", item)
		}
		n, err := strconv.Atoi(item[i+1:])
		if err != nil || n < 0 || n > 1<<20 {
			return nil, fmt.Errorf("floor route %q: size must be 0..1048576", item)
		}
		rs = append(rs, FloorRoute{Prefix: item[:i], Size: n})
	}
	return rs, nil
}

// FloorBody is a JSON object of exactly n bytes (n >= 2; smaller sizes give
// "{}").
func FloorBody(n int) []byte {
	const head, tail = `{"floor":"`, `"}`
	if n < len(head)+len(tail) {
		return []byte("{}")
	}
	b := make([]byte, 0, n)
	b = append(b, head...)
	for len(b) < n-len(tail) {
		b = append(b, 'x')
	}
	return append(b, tail...)
}

// FloorHandler is the floor: the least a fasthttp server can do for a
// request — read it and answer a fixed JSON body — with the body size fraudd
// answers on the same path. The longest matching prefix wins; an unmatched
// path gets def bytes.
func FloorHandler(routes []FloorRoute, def int) fasthttp.RequestHandler {
	type entry struct {
		prefix []byte
		body   []byte
	}
	rs := append([]FloorRoute(nil), routes...)
	sort.SliceStable(rs, func(i, j int) bool { return len(rs[i].Prefix) > len(rs[j].Prefix) })
	entries := make([]entry, len(rs))
	for i, r := range rs {
		entries[i] = entry{prefix: []byte(r.Prefix), body: FloorBody(r.Size)}
	}
	defBody := FloorBody(def)
	return func(ctx *fasthttp.RequestCtx) {
		path := ctx.Path()
		body := defBody
		for i := range entries {
			if hasPrefix(path, entries[i].prefix) {
				body = entries[i].body
				break
			}
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	}
}

func hasPrefix(b, p []byte) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == string(p)
}

// NewFloorServer is a fasthttp server configured like fraudd's (same
// timeouts, no default content type) around FloorHandler.
func NewFloorServer(routes []FloorRoute, def int) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:              FloorHandler(routes, def),
		Name:                 "floor",
		ReadTimeout:          10 * time.Second,
		WriteTimeout:         10 * time.Second,
		IdleTimeout:          60 * time.Second,
		MaxRequestBodySize:   64 << 10,
		NoDefaultContentType: true,
	}
}

// ServeFloor serves the floor on ln until the listener closes.
func ServeFloor(ln net.Listener, routes []FloorRoute, def int) error {
	return NewFloorServer(routes, def).Serve(ln)
}
