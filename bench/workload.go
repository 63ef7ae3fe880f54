package bench

import (
	"math/rand/v2"

	"github.com/valyala/fasthttp"
)

// Filler is the per-worker state a Part's Fill uses: a random source and a
// scratch buffer, both owned by one worker goroutine.
type Filler struct {
	Rand *rand.Rand
	Buf  []byte
}

// Part is one kind of request in a workload.
type Part struct {
	// Name labels the part in reports (e.g. "evaluate-live").
	Name string
	// Weight is the part's share of the workload's requests (any positive
	// scale; parts are picked at random in proportion).
	Weight float64
	// Fill writes one request into req, which the driver has reset: method,
	// RequestURI (a path), headers and body. The driver then sets Host and
	// User-Agent. Fill runs on the worker's goroutine with its own Filler.
	Fill func(req *fasthttp.Request, f *Filler)
	// FloorPath is the path prefix the floor server answers this part on.
	FloorPath string
	// RespSize is the mean body size fraudd answered this part with when the
	// scenario probed it; the floor answers the same size.
	RespSize int
}

// Workload is a weighted mix of parts.
type Workload struct {
	Name  string
	Parts []Part
	// Notes are lines the report prints under the scenario (e.g. a part
	// dropped because its endpoint is not there yet).
	Notes []string
	cum   []float64
}

// NewWorkload builds a workload from parts with positive weights.
func NewWorkload(name string, parts ...Part) *Workload {
	w := &Workload{Name: name}
	for _, p := range parts {
		if p.Weight > 0 {
			w.Parts = append(w.Parts, p)
		}
	}
	w.prepare()
	return w
}

func (w *Workload) prepare() {
	w.cum = w.cum[:0]
	total := 0.0
	for _, p := range w.Parts {
		total += p.Weight
		w.cum = append(w.cum, total)
	}
}

// pick chooses a part index in proportion to the weights.
func (w *Workload) pick(r *rand.Rand) int {
	if len(w.Parts) == 1 {
		return 0
	}
	x := r.Float64() * w.cum[len(w.cum)-1]
	for i, c := range w.cum {
		if x < c {
			return i
		}
	}
	return len(w.cum) - 1
}

// Fill writes the next request of the workload into req and returns the
// index of the part it chose.
func (w *Workload) Fill(req *fasthttp.Request, f *Filler) int {
	i := w.pick(f.Rand)
	req.Reset()
	w.Parts[i].Fill(req, f)
	return i
}

// FloorSizes lists, per floor path prefix, the body size the floor answers:
// the weighted mean of the parts sharing that prefix.
func (w *Workload) FloorSizes() []FloorRoute {
	type acc struct{ sum, weight float64 }
	var order []string
	m := map[string]*acc{}
	for _, p := range w.Parts {
		a := m[p.FloorPath]
		if a == nil {
			a = &acc{}
			m[p.FloorPath] = a
			order = append(order, p.FloorPath)
		}
		a.sum += float64(p.RespSize) * p.Weight
		a.weight += p.Weight
	}
	var out []FloorRoute
	for _, path := range order {
		a := m[path]
		out = append(out, FloorRoute{Prefix: path, Size: int(a.sum/a.weight + 0.5)})
	}
	return out
}
