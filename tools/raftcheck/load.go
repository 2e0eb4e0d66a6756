// The `load` command: N clients putting V-byte values under random keys into a running
// cluster for D seconds, each waiting for its put's answer before the next (following
// redirects to the leader); prints the throughput and the latency percentiles of the
// acknowledged puts.
package main

import (
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// alphabet of the values: printable, so they travel in JSON strings unescaped.
const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

func runLoad(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	nodesFlag := fs.String("nodes", "127.0.0.1:21001,127.0.0.1:21002,127.0.0.1:21003", "the nodes' host:port, comma-separated")
	clients := fs.Int("clients", 8, "concurrent clients, one put in flight each")
	valueBytes := fs.Int("value-bytes", 4096, "bytes per value")
	seconds := fs.Float64("seconds", 20, "how long to put")
	keySpace := fs.Int64("keys", 1_000_000_000, "keys are drawn uniformly from this many")
	token := fs.String("token", "", "bearer token, when the cluster needs one")
	seed := fs.Int64("seed", time.Now().UnixNano(), "random seed")
	_ = fs.Parse(args)

	nodes := strings.Split(*nodesFlag, ",")
	if err := waitForAnyLeader(nodes, 30*time.Second); err != nil {
		return err
	}

	// Values are slices of one random buffer at random offsets: all different, and without
	// the repeats that would let an engine compress them.
	rng := rand.New(rand.NewSource(*seed))
	pool := make([]byte, 1<<20+*valueBytes)
	for i := range pool {
		pool[i] = alphabet[rng.Intn(len(alphabet))]
	}

	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		latencies []time.Duration
		failed    int
		firstErr  error
	)
	start := time.Now()
	end := start.Add(time.Duration(*seconds * float64(time.Second)))
	for c := 0; c < *clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(*seed + int64(c) + 1))
			cl := newClient(nodes, 10*time.Second)
			cl.token = *token
			cl.current = nodes[c%len(nodes)]
			var mine []time.Duration
			bad := 0
			var badErr error
			for time.Now().Before(end) {
				key := fmt.Sprintf("user%012d", r.Int63n(*keySpace))
				off := r.Intn(len(pool) - *valueBytes)
				value := string(pool[off : off+*valueBytes])
				t0 := time.Now()
				if err := cl.put(key, value, t0.Add(10*time.Second)); err != nil {
					bad++
					if badErr == nil {
						badErr = err
					}
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			failed += bad
			if firstErr == nil {
				firstErr = badErr
			}
			mu.Unlock()
		}(c)
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(latencies) == 0 {
		return fmt.Errorf("no put was acknowledged (%d failed; first: %v)", failed, firstErr)
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	pct := func(p float64) float64 {
		i := int(p * float64(len(latencies)-1))
		return float64(latencies[i].Microseconds()) / 1000
	}
	fmt.Printf("ops=%d seconds=%.2f ops_per_sec=%.1f p50_ms=%.2f p99_ms=%.2f failed=%d clients=%d value_bytes=%d\n",
		len(latencies), elapsed.Seconds(), float64(len(latencies))/elapsed.Seconds(), pct(0.50), pct(0.99),
		failed, *clients, *valueBytes)
	if failed > 0 {
		fmt.Fprintf(os.Stderr, "load: %d puts failed; first: %v\n", failed, firstErr)
	}
	return nil
}

// waitForAnyLeader polls the nodes' status until one of them names a leader.
func waitForAnyLeader(nodes []string, timeout time.Duration) error {
	end := time.Now().Add(timeout)
	for time.Now().Before(end) {
		for _, n := range nodes {
			if st, err := status(n, time.Second); err == nil && st.Leader != nil {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("no node named a leader within " + timeout.String())
}
