package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a server process fraudbench started: fraudd or the floor.
type Proc struct {
	Name string
	// Addr is the host:port the process logged it listens on.
	Addr string
	PID  int

	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	tail   []string // last lines of its stderr
}

// listenRE matches the listening line of fraudd and of the floor server:
// msg="fraudd listening" addr=127.0.0.1:PORT.
var listenRE = regexp.MustCompile(`msg="[\w-]+ listening" addr=(\S+)`)

// StartProc starts bin with args and env, and waits (up to 30s) for the line
// on its stderr that says where it listens. The process gets SIGKILL if
// fraudbench dies first.
func StartProc(ctx context.Context, name, bin string, args, env []string) (*Proc, error) {
	p := &Proc{Name: name, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p.cmd.Stdout = io.Discard
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.PID = p.cmd.Process.Pid
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.tail = append(p.tail, line)
			if len(p.tail) > 20 {
				p.tail = p.tail[len(p.tail)-20:]
			}
			p.mu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil && !sent {
				addr <- m[1]
				sent = true
			}
		}
	}()
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case a := <-addr:
		p.Addr = a
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("%s exited before listening:\n%s", name, p.Tail())
	case <-timer.C:
		p.Stop()
		return nil, fmt.Errorf("%s did not say where it listens within 30s:\n%s", name, p.Tail())
	case <-ctx.Done():
		p.Stop()
		return nil, ctx.Err()
	}
}

// URL is the process's base URL.
func (p *Proc) URL() string { return "http://" + p.Addr }

// Tail is the last lines the process wrote to stderr.
func (p *Proc) Tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// Stop sends SIGTERM, waits up to 10s, then kills.
func (p *Proc) Stop() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return errors.New(p.Name + " did not stop on SIGTERM within 10s; killed")
	}
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}
