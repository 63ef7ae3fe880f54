package actors

import (
	"sync"
	"time"

	"github.com/fraudd/fraudd/internal/clock"
)

// Daily runs a housekeeping job (retention pruning) at most once per UTC day
// of the service clock, so the test clock moves it too. Calls by hand and the
// periodic check never overlap. The zero value is ready; Start is optional.
type Daily struct {
	mu      sync.Mutex
	lastDay int64
	ran     bool
	stop    chan struct{}
	done    chan struct{}
}

func utcDay(t time.Time) int64 { return t.Unix() / 86400 }

// Run runs job for now (whatever day it is) and, when it succeeds, marks the
// day as done.
func (d *Daily) Run(now time.Time, job func(time.Time) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := job(now); err != nil {
		return err
	}
	d.lastDay, d.ran = utcDay(now), true
	return nil
}

// Start checks every interval and runs job when the clock shows a day the job
// has not run for; failures go to onErr and are retried at the next check.
func (d *Daily) Start(clk clock.Clock, every time.Duration, job func(time.Time) error, onErr func(error)) {
	d.stop, d.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(d.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-d.stop:
				return
			case <-t.C:
				now := clk.Now()
				d.mu.Lock()
				due := !d.ran || utcDay(now) != d.lastDay
				d.mu.Unlock()
				if due {
					if err := d.Run(now, job); err != nil {
						onErr(err)
					}
				}
			}
		}
	}()
}

// Stop ends the periodic check (a no-op when it was never started).
func (d *Daily) Stop() {
	if d.stop != nil {
		close(d.stop)
		<-d.done
		d.stop = nil
	}
}
