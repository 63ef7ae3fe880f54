package bench

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Thresholds are k6-style pass/fail criteria over every measured server row
// (floor runs are not judged). A zero field is not checked; MaxErrorRate
// uses a negative value for "not checked", since 0 is a meaningful limit.
type Thresholds struct {
	MaxP99       time.Duration
	MaxErrorRate float64 // fraction of measured requests, 0..1; < 0: unchecked
	MinRPS       float64
}

// NoErrorRate is Thresholds.MaxErrorRate when no error rate is checked.
const NoErrorRate = -1

// Any reports whether some threshold is set.
func (t Thresholds) Any() bool { return t.MaxP99 > 0 || t.MaxErrorRate >= 0 || t.MinRPS > 0 }

// ThresholdCheck is one threshold applied to one row.
type ThresholdCheck struct {
	Scenario string  `json:"scenario"`
	Mode     Mode    `json:"mode"`
	Name     string  `json:"name"` // max-p99, max-error-rate, min-rps
	Limit    float64 `json:"limit"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"` // ms, ratio, req/s
	Pass     bool    `json:"pass"`
}

func (c ThresholdCheck) String() string {
	what := map[string]string{"max-p99": "p99", "max-error-rate": "error rate", "min-rps": "throughput"}[c.Name]
	verdict := "within"
	switch {
	case !c.Pass && c.Name == "min-rps":
		verdict = "below"
	case !c.Pass:
		verdict = "exceeds"
	}
	return fmt.Sprintf("%s %s: %s %s %s --%s %s", c.Scenario, c.Mode, what, fmtThreshold(c.Value, c.Unit), verdict, c.Name, fmtThreshold(c.Limit, c.Unit))
}

func fmtThreshold(v float64, unit string) string {
	switch unit {
	case "ms":
		return strconv.FormatFloat(v, 'f', -1, 64) + "ms"
	case "ratio":
		return strconv.FormatFloat(v*100, 'f', -1, 64) + "%"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " req/s"
}

// Check applies t to every row of rep, records the checks in
// rep.Thresholds and returns the failed ones.
func (t Thresholds) Check(rep *Report) []ThresholdCheck {
	var failed []ThresholdCheck
	add := func(r Row, name string, limit, value float64, unit string, pass bool) {
		c := ThresholdCheck{Scenario: r.Scenario, Mode: r.Mode, Name: name, Limit: limit, Value: value, Unit: unit, Pass: pass}
		rep.Thresholds = append(rep.Thresholds, c)
		if !pass {
			failed = append(failed, c)
		}
	}
	for _, r := range rep.Results {
		if t.MaxP99 > 0 {
			limit := float64(t.MaxP99) / float64(time.Millisecond)
			add(r, "max-p99", limit, r.P99, "ms", r.Requests > 0 && r.P99 <= limit)
		}
		if t.MaxErrorRate >= 0 {
			rate := 1.0
			if total := r.Requests + errUnanswered(r); total > 0 {
				rate = round(float64(r.Errors)/float64(total), 6)
			}
			add(r, "max-error-rate", t.MaxErrorRate, rate, "ratio", rate <= t.MaxErrorRate)
		}
		if t.MinRPS > 0 {
			add(r, "min-rps", t.MinRPS, r.RPS, "req/s", r.RPS >= t.MinRPS)
		}
	}
	return failed
}

// errUnanswered is the errors that are not among the answered requests:
// the open loop's requests that were due but never sent, and exchanges that
// failed without an answer.
func errUnanswered(r Row) int64 {
	return r.ErrorsByStatus["missed"] + r.ErrorsByStatus["conn"] + r.ErrorsByStatus["timeout"]
}

// ParseErrorRate reads "0.01" or "1%" as a fraction in [0, 1].
func ParseErrorRate(s string) (float64, error) {
	v := strings.TrimSpace(s)
	pct := strings.HasSuffix(v, "%")
	f, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a rate: give a fraction like 0.01 or a percentage like 1%%", s)
	}
	if pct {
		f /= 100
	}
	if !(f >= 0 && f <= 1) { // NaN too
		return 0, errors.New("an error rate lies between 0 and 1 (0% and 100%)")
	}
	return f, nil
}
