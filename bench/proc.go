package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// ClockTicks is Linux's USER_HZ, the unit of utime and stime in
// /proc/<pid>/stat. It is 100 on every architecture Go supports on Linux
// (the kernel fixes it for user space whatever CONFIG_HZ is).
const ClockTicks = 100

// ProcSample is one reading of a process's CPU time and memory.
type ProcSample struct {
	At time.Time
	// UTime and STime are user and system CPU time of all the process's
	// threads, in clock ticks.
	UTime, STime uint64
	// HWMKB is the peak resident set size (VmHWM), RSSKB the current one
	// (VmRSS), in KiB.
	HWMKB, RSSKB uint64
}

// CPU is the sample's total CPU time.
func (s ProcSample) CPU() time.Duration {
	return time.Duration(s.UTime+s.STime) * (time.Second / ClockTicks)
}

// ParseStat reads utime and stime (fields 14 and 15) from the contents of a
// /proc/<pid>/stat file. The command name (field 2) may hold spaces and
// parentheses, so fields are counted from its last ')'.
func ParseStat(b []byte) (utime, stime uint64, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("proc stat: no ')' after the command name")
	}
	fields := bytes.Fields(b[i+1:])
	// fields[0] is field 3 (state); utime is field 14, stime field 15.
	if len(fields) < 13 {
		return 0, 0, fmt.Errorf("proc stat: %d fields after the command name, want at least 13", len(fields))
	}
	if utime, err = strconv.ParseUint(string(fields[11]), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("proc stat utime: %w", err)
	}
	if stime, err = strconv.ParseUint(string(fields[12]), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("proc stat stime: %w", err)
	}
	return utime, stime, nil
}

// ParseStatusKB reads a "Name:   1234 kB" line (e.g. VmHWM) from the contents
// of a /proc/<pid>/status file. ok is false when the line is missing (a
// kernel thread, or a process that has exited).
func ParseStatusKB(b []byte, name string) (kb uint64, ok bool, err error) {
	key := []byte(name + ":")
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if !bytes.HasPrefix(line, key) {
			continue
		}
		f := bytes.Fields(line[len(key):])
		if len(f) == 0 {
			return 0, false, fmt.Errorf("proc status %s: no value", name)
		}
		v, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("proc status %s: %w", name, err)
		}
		if len(f) > 1 && !bytes.EqualFold(f[1], []byte("kB")) {
			return 0, false, fmt.Errorf("proc status %s: unit %q, want kB", name, f[1])
		}
		return v, true, nil
	}
	return 0, false, nil
}

// SampleProc reads /proc/<pid>/stat and /proc/<pid>/status. pid 0 is this
// process.
func SampleProc(pid int) (ProcSample, error) {
	dir := "/proc/self"
	if pid > 0 {
		dir = "/proc/" + strconv.Itoa(pid)
	}
	s := ProcSample{At: time.Now()}
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return s, err
	}
	if s.UTime, s.STime, err = ParseStat(stat); err != nil {
		return s, err
	}
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return s, err
	}
	if s.HWMKB, _, err = ParseStatusKB(status, "VmHWM"); err != nil {
		return s, err
	}
	if s.RSSKB, _, err = ParseStatusKB(status, "VmRSS"); err != nil {
		return s, err
	}
	return s, nil
}

// CPUWatch samples a process's CPU time at the start and the end of a
// measured window (wire Start and End to RunConfig.OnMeasureStart and
// OnMeasureEnd).
type CPUWatch struct {
	PID        int // 0: this process
	start, end ProcSample
	err        error
}

// Start takes the window's first sample.
func (w *CPUWatch) Start() {
	w.start, w.err = SampleProc(w.PID)
}

// End takes the window's last sample.
func (w *CPUWatch) End() {
	var err error
	w.end, err = SampleProc(w.PID)
	if w.err == nil {
		w.err = err
	}
}

// CPU is the CPU time the process used in the window.
func (w *CPUWatch) CPU() (time.Duration, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.start.At.IsZero() || w.end.At.IsZero() {
		return 0, errors.New("cpu watch: window not sampled")
	}
	return w.end.CPU() - w.start.CPU(), nil
}

// PeakRSSKB is the process's peak resident set size at the end of the window.
func (w *CPUWatch) PeakRSSKB() uint64 { return w.end.HWMKB }
