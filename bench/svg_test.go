package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"testing"
)

// wellFormed decodes the whole document and counts elements by name.
func wellFormed(t *testing.T, doc []byte) map[string]int {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	counts := map[string]int{}
	depth, roots := 0, 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				roots++
				if e.Name.Local != "svg" || e.Name.Space != "http://www.w3.org/2000/svg" {
					t.Fatalf("root element %v, want svg in the SVG namespace", e.Name)
				}
			}
			depth++
			counts[e.Name.Local]++
		case xml.EndElement:
			depth--
		}
	}
	if roots != 1 || depth != 0 {
		t.Fatalf("%d root elements, depth %d at the end", roots, depth)
	}
	return counts
}

func TestSVGWellFormed(t *testing.T) {
	rep := fixedReport()
	rep.Target = `fraudd <started> & "quoted"` // must be escaped
	counts := wellFormed(t, RenderSVG(rep))
	// Row 1 has a floor (2 curves + 2 timelines), row 2 none (1 + 1).
	if counts["polyline"] != 6 {
		t.Fatalf("%d polylines, want 6", counts["polyline"])
	}
	if counts["text"] < 20 {
		t.Fatalf("only %d text elements: axes, labels and legend missing?", counts["text"])
	}
	if counts["circle"] == 0 {
		t.Fatal("the interval with errors is not marked")
	}
}

func TestSVGEmptyReport(t *testing.T) {
	counts := wellFormed(t, RenderSVG(&Report{Date: "2026-11-22T06:00:00Z"}))
	if counts["polyline"] != 0 {
		t.Fatalf("%d polylines for no results", counts["polyline"])
	}
}

func TestNiceStep(t *testing.T) {
	for _, c := range []struct{ span, want float64 }{{10, 2}, {1, 0.2}, {50000, 10000}, {7, 2}, {3, 0.5}} {
		if got := niceStep(c.span, 6); got != c.want {
			t.Errorf("niceStep(%v) = %v, want %v", c.span, got, c.want)
		}
	}
}
