// A cluster of `serve` processes on loopback: started, killed with SIGKILL, restarted on
// their own directories, and partitioned through the fault-injection endpoint.
package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// node is one server process.
type node struct {
	id   uint64
	addr string
	dir  string
	cmd  *exec.Cmd
	log  *os.File
}

// cluster is three (or more) nodes of one binary.
type cluster struct {
	bin   string
	extra []string // more flags for every node
	nodes []*node
	peers string // the --peers value
}

func newCluster(bin, root string, basePort, size int, extra []string) *cluster {
	c := &cluster{bin: bin, extra: extra}
	var peers []string
	for i := 1; i <= size; i++ {
		n := &node{
			id:   uint64(i),
			addr: fmt.Sprintf("127.0.0.1:%d", basePort+i),
			dir:  filepath.Join(root, fmt.Sprintf("node%d", i)),
		}
		c.nodes = append(c.nodes, n)
		peers = append(peers, fmt.Sprintf("%d=%s", n.id, n.addr))
	}
	c.peers = strings.Join(peers, ",")
	return c
}

func (c *cluster) addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.addr
	}
	return out
}

func (c *cluster) byID() map[uint64]string {
	out := map[uint64]string{}
	for _, n := range c.nodes {
		out[n.id] = n.addr
	}
	return out
}

func (c *cluster) node(id uint64) *node {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// start runs node n (its output appended to <dir>.log); init makes it initialize the cluster.
func (c *cluster) start(n *node, init bool) error {
	if err := os.MkdirAll(filepath.Dir(n.dir), 0o755); err != nil {
		return err
	}
	log, err := os.OpenFile(n.dir+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := []string{"serve", "--id", fmt.Sprint(n.id), "--listen", n.addr, "--dir", n.dir, "--peers", c.peers}
	if init {
		args = append(args, "--init")
	}
	args = append(args, c.extra...)
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout = log
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting %s: %w", c.bin, err)
	}
	n.cmd, n.log = cmd, log
	return nil
}

// kill sends SIGKILL to n and waits for it to die.
func (n *node) kill() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	_ = n.cmd.Wait()
	n.log.Close()
	n.cmd = nil
}

// stop kills every node still running.
func (c *cluster) stop() {
	for _, n := range c.nodes {
		n.kill()
	}
}

// isolate turns n's partition on or off (POST /debug/isolate).
func (n *node) isolate(on bool) error {
	body := fmt.Sprintf(`{"isolated": %v}`, on)
	hc := http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Post("http://"+n.addr+"/debug/isolate", "application/json", bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("node %d /debug/isolate: %s (started without --allow-fault-injection?)", n.id, resp.Status)
	}
	return nil
}
