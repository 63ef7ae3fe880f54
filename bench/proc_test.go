package bench

import (
	"os"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses: fields count from the
	// last ')'.
	stat := "4242 (fraud d) (x)) S 1 4242 4242 0 -1 4194560 1391 0 0 0 1234 567 0 0 20 0 9 0 123456 1234567890 4321 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	u, s, err := ParseStat([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if u != 1234 || s != 567 {
		t.Fatalf("utime %d stime %d, want 1234 567", u, s)
	}
	for _, bad := range []string{"", "1 (x S 1 2", "1 (x) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 abc 5 0 0"} {
		if _, _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("ParseStat(%q): no error", bad)
		}
	}
}

func TestParseStatusKB(t *testing.T) {
	status := "Name:\tfraudd\nVmPeak:\t  812345 kB\nVmHWM:\t  145678 kB\nVmRSS:\t  140000 kB\nThreads:\t9\n"
	kb, ok, err := ParseStatusKB([]byte(status), "VmHWM")
	if err != nil || !ok || kb != 145678 {
		t.Fatalf("VmHWM = %d, %v, %v; want 145678", kb, ok, err)
	}
	if _, ok, err := ParseStatusKB([]byte(status), "VmSwap"); ok || err != nil {
		t.Fatalf("missing line: ok %v err %v", ok, err)
	}
	if _, _, err := ParseStatusKB([]byte("VmHWM:\t12 MB\n"), "VmHWM"); err == nil {
		t.Fatal("a unit other than kB was accepted")
	}
	// "VmHWM" must not match a longer name that starts with it.
	if _, ok, _ := ParseStatusKB([]byte("VmHWMx:\t1 kB\n"), "VmHWM"); ok {
		t.Fatal("matched a longer field name")
	}
}

func TestSampleProcSelf(t *testing.T) {
	w := &CPUWatch{PID: os.Getpid()}
	w.Start()
	deadline := time.Now().Add(60 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	w.End()
	cpu, err := w.CPU()
	if err != nil {
		t.Fatal(err)
	}
	if cpu < 0 {
		t.Fatalf("negative CPU time %v", cpu)
	}
	if w.PeakRSSKB() == 0 {
		t.Fatal("no VmHWM for this process")
	}
	if _, err := SampleProc(0); err != nil {
		t.Fatal(err)
	}
	if _, err := (&CPUWatch{}).CPU(); err == nil {
		t.Fatal("an unsampled watch reported CPU time")
	}
	_ = x
}
