// The `linearizability` command: a 3-node cluster of `serve` processes, concurrent clients
// doing random put/get/delete on a few keys while the leader is killed with SIGKILL at a fixed
// period (and restarted on its directory) and a node is partitioned twice; then the faults
// are healed, every key is read, and the recorded history is checked by porcupine.
package main

import (
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// linConfig is the run's settings.
type linConfig struct {
	bin            string
	extra          []string
	dir            string
	history        string
	basePort       int
	seconds        float64
	clients        int
	keys           int
	killEvery      time.Duration
	restartAfter   time.Duration
	partitions     int
	partitionFor   time.Duration
	opTimeout      time.Duration
	checkTimeout   time.Duration
	seed           int64
	keep           bool
	visualizeIfBad string
}

func runLinearizability(args []string) error {
	fs := flag.NewFlagSet("linearizability", flag.ExitOnError)
	var cfg linConfig
	var extra string
	fs.StringVar(&cfg.bin, "bin", "target/debug/wisckey", "the server binary (run as `<bin> serve ...`)")
	fs.StringVar(&extra, "extra-args", "--allow-fault-injection", "more flags for every node, space-separated")
	fs.StringVar(&cfg.dir, "dir", "", "where the nodes' directories and logs go (default: a new temporary directory)")
	fs.StringVar(&cfg.history, "history", "", "where the history is written as JSON (default: <dir>/history.json)")
	fs.IntVar(&cfg.basePort, "base-port", 23000, "node i listens on 127.0.0.1:<base-port + i>")
	fs.Float64Var(&cfg.seconds, "seconds", 60, "how long the clients run")
	fs.IntVar(&cfg.clients, "clients", 5, "concurrent clients")
	fs.IntVar(&cfg.keys, "keys", 20, "keys the clients use")
	fs.DurationVar(&cfg.killEvery, "kill-every", 10*time.Second, "kill -9 the leader at this period (0: never)")
	fs.DurationVar(&cfg.restartAfter, "restart-after", 2*time.Second, "restart a killed node after this long")
	fs.IntVar(&cfg.partitions, "partitions", 2, "how many times a node is partitioned")
	fs.DurationVar(&cfg.partitionFor, "partition-for", 3*time.Second, "how long each partition lasts")
	fs.DurationVar(&cfg.opTimeout, "op-timeout", 3*time.Second, "a client gives up on an operation after this long")
	fs.DurationVar(&cfg.checkTimeout, "check-timeout", 120*time.Second, "porcupine's time limit (0: none)")
	fs.Int64Var(&cfg.seed, "seed", time.Now().UnixNano(), "random seed")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the temporary directory")
	fs.StringVar(&cfg.visualizeIfBad, "visualize", "", "write porcupine's HTML visualization here when not linearizable")
	_ = fs.Parse(args)
	cfg.extra = strings.Fields(extra)

	if cfg.dir == "" {
		dir, err := os.MkdirTemp("", "raftcheck-")
		if err != nil {
			return err
		}
		cfg.dir = dir
		if !cfg.keep {
			defer os.RemoveAll(dir)
		}
	}
	if cfg.history == "" {
		cfg.history = filepath.Join(cfg.dir, "history.json")
	}
	return linearizability(&cfg)
}

// recorder collects the history's operations from every client.
type recorder struct {
	mu    sync.Mutex
	ops   []Op
	start time.Time
}

func (r *recorder) now() int64 { return time.Since(r.start).Nanoseconds() }

func (r *recorder) add(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// faultLog says what the fault schedule did.
type faultLog struct {
	mu     sync.Mutex
	events []string
}

func (f *faultLog) add(rec *recorder, format string, args ...any) {
	msg := fmt.Sprintf("%6.2fs ", float64(rec.now())/1e9) + fmt.Sprintf(format, args...)
	f.mu.Lock()
	f.events = append(f.events, msg)
	f.mu.Unlock()
	fmt.Fprintln(os.Stderr, "fault:", msg)
}

func linearizability(cfg *linConfig) error {
	c := newCluster(cfg.bin, cfg.dir, cfg.basePort, 3, cfg.extra)
	defer c.stop()
	for i, n := range c.nodes {
		if err := c.start(n, i == 0); err != nil {
			return err
		}
	}
	if _, err := waitForLeader(c.byID(), 60*time.Second); err != nil {
		return fmt.Errorf("the cluster did not come up (logs in %s): %w", cfg.dir, err)
	}

	rec := &recorder{start: time.Now()}
	end := rec.start.Add(time.Duration(cfg.seconds * float64(time.Second)))
	faults := &faultLog{}
	var wg sync.WaitGroup
	for w := 0; w < cfg.clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			runClient(cfg, c, rec, w, end)
		}(w)
	}
	faultErr := make(chan error, 1)
	go func() { faultErr <- runFaults(cfg, c, rec, faults, end) }()
	wg.Wait()
	if err := <-faultErr; err != nil {
		return err
	}

	// Heal: every node running and connected, then read every key.
	for _, n := range c.nodes {
		if n.cmd == nil {
			if err := c.start(n, false); err != nil {
				return err
			}
		}
	}
	for _, n := range c.nodes {
		_ = n.isolate(false)
	}
	if _, err := waitForLeader(c.byID(), 30*time.Second); err != nil {
		return fmt.Errorf("no leader after healing: %w", err)
	}
	final, err := finalReads(cfg, c, rec)
	if err != nil {
		return err
	}

	h := &History{Ops: rec.ops}
	if err := h.write(cfg.history); err != nil {
		return err
	}
	summarize(h, faults)
	if err := checkAcknowledgedLastWrites(h, final); err != nil {
		return err
	}
	t0 := time.Now()
	res, err := h.check(cfg.checkTimeout, cfg.visualizeIfBad)
	if err != nil {
		return err
	}
	fmt.Printf("porcupine: %s (%d operations, checked in %v); history: %s\n", res, len(h.Ops),
		time.Since(t0).Round(time.Millisecond), cfg.history)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Illegal:
		return errors.New("the history is NOT linearizable")
	default:
		return fmt.Errorf("porcupine did not decide within %v", cfg.checkTimeout)
	}
}

// runClient does random operations until end. A write whose outcome is unknown is recorded
// as never returning, and the client continues as a new process (porcupine's clients are
// sequential).
func runClient(cfg *linConfig, c *cluster, rec *recorder, w int, end time.Time) {
	r := rand.New(rand.NewSource(cfg.seed + int64(w)))
	cl := newClient(c.addrs(), cfg.opTimeout)
	cl.current = c.addrs()[w%len(c.nodes)]
	process := w
	seq := 0
	for time.Now().Before(end) {
		key := fmt.Sprintf("k%02d", r.Intn(cfg.keys))
		op := Op{Client: process, Key: key}
		call := rec.now()
		deadline := time.Now().Add(cfg.opTimeout)
		var err error
		switch p := r.Intn(100); {
		case p < 45:
			seq++
			op.Kind, op.Value = "put", fmt.Sprintf("c%d-%d", w, seq)
			err = cl.put(key, op.Value, deadline)
		case p < 85:
			op.Kind = "get"
			op.Output, err = cl.get(key, deadline)
		default:
			op.Kind = "delete"
			err = cl.del(key, deadline)
		}
		ret := rec.now()
		op.Call = call
		switch {
		case err == nil:
			op.Return = &ret
			rec.add(op)
		case op.Kind == "get":
			// A read that failed constrains nothing: left out.
		case errors.Is(err, errUnknown):
			rec.add(op) // Return nil: may take effect at any time after its call
			process += cfg.clients
		default:
			fmt.Fprintf(os.Stderr, "client %d: %s %s refused: %v\n", w, op.Kind, key, err)
		}
	}
}

// runFaults kills the leader every cfg.killEvery (restarting it cfg.restartAfter later)
// and partitions a node cfg.partitions times (the leader first, then a follower), spread over
// the run so that a partition never overlaps a kill.
func runFaults(cfg *linConfig, c *cluster, rec *recorder, faults *faultLog, end time.Time) error {
	type event struct {
		at time.Duration
		do func() error
	}
	total := time.Duration(cfg.seconds * float64(time.Second))
	var events []event
	for k := 1; cfg.killEvery > 0 && time.Duration(k)*cfg.killEvery < total; k++ {
		at := time.Duration(k) * cfg.killEvery
		var killed *node
		events = append(events, event{at, func() error {
			id, err := waitForLeader(c.byID(), 3*time.Second)
			if err != nil {
				faults.add(rec, "no leader to kill")
				return nil
			}
			killed = c.node(id)
			killed.kill()
			faults.add(rec, "kill -9 leader %d", id)
			return nil
		}})
		events = append(events, event{at + cfg.restartAfter, func() error {
			if killed == nil {
				return nil
			}
			faults.add(rec, "restart %d", killed.id)
			return c.start(killed, false)
		}})
	}
	for i := 0; i < cfg.partitions; i++ {
		at := total*time.Duration(i+1)/time.Duration(cfg.partitions+1) - cfg.partitionFor - time.Second
		if at < 500*time.Millisecond {
			at = 500 * time.Millisecond
		}
		var isolated *node
		leaderFirst := i%2 == 0
		events = append(events, event{at, func() error {
			id, err := waitForLeader(c.byID(), 3*time.Second)
			if err != nil {
				faults.add(rec, "no leader: partition skipped")
				return nil
			}
			isolated = c.node(id)
			if !leaderFirst {
				isolated = c.node(id%uint64(len(c.nodes)) + 1)
			}
			if isolated.cmd == nil {
				isolated = nil
				return nil
			}
			faults.add(rec, "isolate node %d (leader %d)", isolated.id, id)
			return isolated.isolate(true)
		}})
		events = append(events, event{at + cfg.partitionFor, func() error {
			if isolated == nil {
				return nil
			}
			faults.add(rec, "heal node %d", isolated.id)
			return isolated.isolate(false)
		}})
	}
	// In time order (insertion sort: a handful of events).
	for i := 1; i < len(events); i++ {
		for j := i; j > 0 && events[j].at < events[j-1].at; j-- {
			events[j], events[j-1] = events[j-1], events[j]
		}
	}
	for _, e := range events {
		if wait := time.Until(rec.start.Add(e.at)); wait > 0 {
			time.Sleep(wait)
		}
		if time.Now().After(end.Add(cfg.restartAfter)) {
			break
		}
		if err := e.do(); err != nil {
			return err
		}
	}
	return nil
}

// finalReads reads every key once the cluster is healed, as one more client whose reads
// join the history (so the check covers them: an acknowledged write that was lost makes
// them wrong).
func finalReads(cfg *linConfig, c *cluster, rec *recorder) (map[string]*string, error) {
	cl := newClient(c.addrs(), cfg.opTimeout)
	process := 1_000_000
	final := map[string]*string{}
	for k := 0; k < cfg.keys; k++ {
		key := fmt.Sprintf("k%02d", k)
		var lastErr error
		for attempt := 0; attempt < 5; attempt++ {
			call := rec.now()
			v, err := cl.get(key, time.Now().Add(10*time.Second))
			ret := rec.now()
			if err != nil {
				lastErr = err
				continue
			}
			rec.add(Op{Client: process, Kind: "get", Key: key, Call: call, Return: &ret, Output: v})
			final[key] = v
			lastErr = nil
			break
		}
		if lastErr != nil {
			return nil, fmt.Errorf("final read of %s failed: %w", key, lastErr)
		}
	}
	return final, nil
}

// checkAcknowledgedLastWrites: for each key whose last write was acknowledged and
// overlapped no other write to the key, the final read must show that write (the direct form
// of "every acknowledged write is present"; porcupine's check covers the rest).
func checkAcknowledgedLastWrites(h *History, final map[string]*string) error {
	writes := map[string][]Op{}
	for _, op := range h.Ops {
		if op.Kind != "get" {
			writes[op.Key] = append(writes[op.Key], op)
		}
	}
	checked := 0
	for key, ws := range writes {
		last := ws[0]
		for _, w := range ws[1:] {
			if w.Call > last.Call {
				last = w
			}
		}
		if last.Return == nil {
			continue
		}
		overlapped := false
		for _, w := range ws {
			if w.Call != last.Call && (w.Return == nil || *w.Return >= last.Call) {
				overlapped = true
			}
		}
		if overlapped {
			continue
		}
		checked++
		got := final[key]
		switch {
		case last.Kind == "put" && (got == nil || *got != last.Value):
			return fmt.Errorf("key %s: the acknowledged put of %q is lost (final read: %v)", key, last.Value, describe(got))
		case last.Kind == "delete" && got != nil:
			return fmt.Errorf("key %s: deleted (acknowledged), yet the final read shows %q", key, *got)
		}
	}
	fmt.Printf("acknowledged last writes: %d of %d keys checked against the final reads, all present\n", checked, len(final))
	return nil
}

func describe(v *string) string {
	if v == nil {
		return "absent"
	}
	return fmt.Sprintf("%q", *v)
}

func summarize(h *History, faults *faultLog) {
	counts := map[string][2]int{}
	for _, op := range h.Ops {
		cnt := counts[op.Kind]
		if op.Return == nil {
			cnt[1]++
		} else {
			cnt[0]++
		}
		counts[op.Kind] = cnt
	}
	for _, kind := range []string{"put", "get", "delete"} {
		fmt.Printf("%-6s acknowledged %6d  unknown outcome %4d\n", kind, counts[kind][0], counts[kind][1])
	}
	fmt.Printf("faults: %s\n", strings.Join(faults.events, "; "))
}
