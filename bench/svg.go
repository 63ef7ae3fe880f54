package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strings"
)

// The chart: two panels, latency by percentile (log-log, the HdrHistogram
// plot) and throughput over time, one colour per scenario run, the floor
// dashed in the same colour.
const (
	svgW       = 1240
	panelH     = 430
	plotLeft   = 80
	plotRight  = 720 // plot area ends here; the legend is to its right
	plotTop    = 50
	plotBottom = 370
	legendX    = 745
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"}

func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

type svgSeries struct {
	label  string
	color  string
	dashed bool
	xs, ys []float64
	marks  []int // indexes of points to mark (errors)
}

// RenderSVG draws the report's latency distributions and throughput over
// time as a standalone SVG document.
func RenderSVG(rep *Report) []byte {
	var b bytes.Buffer
	h := 2*panelH + 70
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">`+"\n", svgW, h, svgW, h)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", svgW, h)
	title := fmt.Sprintf("fraudbench — %s — %d× %s", rep.Date, rep.Machine.NProc, rep.Machine.CPUModel)
	fmt.Fprintf(&b, `<text x="%d" y="26" font-size="16" font-weight="bold">%s</text>`+"\n", plotLeft, esc(title))
	sub := rep.Target
	if len(sub) > 140 {
		sub = sub[:140] + "…"
	}
	fmt.Fprintf(&b, `<text x="%d" y="44" font-size="11" fill="#555">%s</text>`+"\n", plotLeft, esc(sub))

	var lat, thr []svgSeries
	for i, r := range rep.Results {
		color := palette[i%len(palette)]
		name := r.Scenario + " " + string(r.Mode)
		if r.Rate != nil {
			name += fmt.Sprintf(" @%.0f/s", *r.Rate)
		}
		cpu := ""
		if r.ServerCPU != nil {
			cpu = fmt.Sprintf(", %.0f µs CPU/req", *r.ServerCPU)
			if r.RatioCPU != nil {
				cpu += fmt.Sprintf(" (%.2f× floor)", *r.RatioCPU)
			}
		}
		lat = append(lat, curveSeries(fmt.Sprintf("%s: p99 %.2f ms%s", name, r.P99, cpu), color, false, r.Curve))
		thr = append(thr, timelineSeries(fmt.Sprintf("%s: %s req/s", name, kilo(r.RPS)), color, false, r.Timeline))
		if r.FloorCurve != nil {
			fcpu := ""
			if r.FloorServerCPU != nil {
				fcpu = fmt.Sprintf(", %.0f µs CPU/req", *r.FloorServerCPU)
			}
			lat = append(lat, curveSeries(fmt.Sprintf("  floor: p99 %.2f ms%s", *r.FloorP99, fcpu), color, true, r.FloorCurve))
		}
		if r.FloorTimeline != nil {
			thr = append(thr, timelineSeries(fmt.Sprintf("  floor: %s req/s", kilo(*r.FloorRPS)), color, true, *r.FloorTimeline))
		}
	}
	drawLatencyPanel(&b, 30, lat)
	drawThroughputPanel(&b, 30+panelH+10, thr)
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func kilo(x float64) string {
	if x >= 10000 {
		return fmt.Sprintf("%.1fk", x/1000)
	}
	return fmt.Sprintf("%.0f", x)
}

// percentile p → x = log10(1/(1-p)): 90% → 1, 99% → 2, 99.9% → 3, …
const maxNines = 5.0

func nines(p float64) float64 {
	if p >= 100 {
		return maxNines
	}
	return math.Min(maxNines, math.Log10(100/(100-p)))
}

func curveSeries(label, color string, dashed bool, c []Quantile) svgSeries {
	s := svgSeries{label: label, color: color, dashed: dashed}
	for _, q := range c {
		if q.Percentile >= 100 {
			continue
		}
		s.xs = append(s.xs, nines(q.Percentile))
		s.ys = append(s.ys, math.Max(q.Ms, 0.001))
	}
	return s
}

func timelineSeries(label, color string, dashed bool, t Series) svgSeries {
	s := svgSeries{label: label, color: color, dashed: dashed}
	for i, v := range t.RPS {
		s.xs = append(s.xs, (float64(i)+0.5)*t.IntervalS)
		s.ys = append(s.ys, v)
		if i < len(t.Errors) && t.Errors[i] > 0 {
			s.marks = append(s.marks, i)
		}
	}
	return s
}

type axis struct {
	lo, hi float64
	log    bool
	px0    float64 // pixel of lo
	px1    float64 // pixel of hi
}

func (a axis) at(v float64) float64 {
	var f float64
	if a.log {
		f = (math.Log10(v) - math.Log10(a.lo)) / (math.Log10(a.hi) - math.Log10(a.lo))
	} else {
		f = (v - a.lo) / (a.hi - a.lo)
	}
	return a.px0 + f*(a.px1-a.px0)
}

func panelFrame(b *bytes.Buffer, top int, title, xlabel, ylabel string) {
	fmt.Fprintf(b, `<g transform="translate(0,%d)">`+"\n", top)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", plotLeft, plotTop-14, esc(title))
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#fafafa" stroke="#999"/>`+"\n",
		plotLeft, plotTop, plotRight-plotLeft, plotBottom-plotTop)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", (plotLeft+plotRight)/2, plotBottom+40, esc(xlabel))
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" transform="rotate(-90 %d %d)">%s</text>`+"\n",
		22, (plotTop+plotBottom)/2, 22, (plotTop+plotBottom)/2, esc(ylabel))
}

func drawSeries(b *bytes.Buffer, xa, ya axis, ss []svgSeries) {
	for _, s := range ss {
		if len(s.xs) == 0 {
			continue
		}
		var pts []string
		for i := range s.xs {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xa.at(s.xs[i]), ya.at(s.ys[i])))
		}
		dash := ""
		width := 2.0
		if s.dashed {
			dash = ` stroke-dasharray="6 4"`
			width = 1.5
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="%.1f"%s points="%s"/>`+"\n", s.color, width, dash, strings.Join(pts, " "))
		for _, i := range s.marks {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="#e00" stroke="#fff"><title>errors in this interval</title></circle>`+"\n",
				xa.at(s.xs[i]), ya.at(s.ys[i]))
		}
	}
}

func drawLegend(b *bytes.Buffer, ss []svgSeries, extra string) {
	y := plotTop + 8
	for _, s := range ss {
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", legendX, y, legendX+28, y, s.color, dash)
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="11">%s</text>`+"\n", legendX+34, y+4, esc(s.label))
		y += 18
		if y > plotBottom+30 {
			fmt.Fprintf(b, `<text x="%d" y="%d" font-size="11" fill="#555">…</text>`+"\n", legendX+34, y+4)
			break
		}
	}
	if extra != "" {
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="11" fill="#555">%s</text>`+"\n", legendX, y+10, esc(extra))
	}
}

func drawLatencyPanel(b *bytes.Buffer, top int, ss []svgSeries) {
	panelFrame(b, top, "Latency by percentile (log scale)", "percentile", "latency (ms)")
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, y := range s.ys {
			lo, hi = math.Min(lo, y), math.Max(hi, y)
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 0.01, 1
	}
	lo = math.Pow(10, math.Floor(math.Log10(lo)))
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	xa := axis{lo: 0, hi: maxNines, px0: plotLeft, px1: plotRight}
	ya := axis{lo: lo, hi: hi, log: true, px0: plotBottom, px1: plotTop}
	for _, t := range []struct {
		x     float64
		label string
	}{{0, "0%"}, {nines(50), "50%"}, {1, "90%"}, {2, "99%"}, {3, "99.9%"}, {4, "99.99%"}, {5, "99.999%"}} {
		x := xa.at(t.x)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, plotTop, x, plotBottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="11">%s</text>`+"\n", x, plotBottom+16, t.label)
	}
	for d := lo; d <= hi*1.0001; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := d * m
			if v > hi*1.0001 {
				break
			}
			y := ya.at(v)
			stroke := "#eee"
			if m == 1 {
				stroke = "#ccc"
			}
			fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", plotLeft, y, plotRight, y, stroke)
			fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" font-size="11">%s</text>`+"\n", plotLeft-6, y+4, fmtTick(v))
		}
	}
	drawSeries(b, xa, ya, ss)
	drawLegend(b, ss, "dashed: the floor (bare fasthttp, same body size)")
	b.WriteString("</g>\n")
}

func drawThroughputPanel(b *bytes.Buffer, top int, ss []svgSeries) {
	panelFrame(b, top, "Throughput over the measured window", "seconds since the end of the warm-up", "requests per second")
	xmax, ymax := 0.0, 0.0
	for _, s := range ss {
		for i := range s.xs {
			xmax = math.Max(xmax, s.xs[i])
			ymax = math.Max(ymax, s.ys[i])
		}
	}
	if xmax <= 0 {
		xmax = 1
	}
	if ymax <= 0 {
		ymax = 1
	}
	xstep := niceStep(xmax, 8)
	xmax = math.Ceil(xmax/xstep) * xstep
	ystep := niceStep(ymax*1.05, 6)
	ymax = math.Ceil(ymax*1.05/ystep) * ystep
	xa := axis{lo: 0, hi: xmax, px0: plotLeft, px1: plotRight}
	ya := axis{lo: 0, hi: ymax, px0: plotBottom, px1: plotTop}
	for v := 0.0; v <= xmax+xstep/2; v += xstep {
		x := xa.at(v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e4e4e4"/>`+"\n", x, plotTop, x, plotBottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="11">%s</text>`+"\n", x, plotBottom+16, fmtTick(v))
	}
	for v := 0.0; v <= ymax+ystep/2; v += ystep {
		y := ya.at(v)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e4e4e4"/>`+"\n", plotLeft, y, plotRight, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" font-size="11">%s</text>`+"\n", plotLeft-6, y+4, kilo(v))
	}
	drawSeries(b, xa, ya, ss)
	drawLegend(b, ss, "red dots: intervals with errors")
	b.WriteString("</g>\n")
}

// niceStep is a 1-2-5 step giving about n ticks over [0, span].
func niceStep(span float64, n int) float64 {
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

func fmtTick(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000:
		return kilo(v)
	case v >= 1:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
	default:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.4f", v), "0"), ".")
	}
}
