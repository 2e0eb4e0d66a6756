// The HTTP client of the replicated server's JSON API: one request at a time, following
// 421 redirects to the leader and moving on to the next node when one does not answer.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"
)

// errUnknown says a request may or may not have taken effect (it was sent, and no answer
// came back saying which).
var errUnknown = errors.New("outcome unknown")

// kvClient talks to a cluster through whichever node it last found to be the leader.
type kvClient struct {
	nodes   []string // "host:port" of every node
	current string   // the node requests go to first
	http    *http.Client
	token   string
}

func newClient(nodes []string, timeout time.Duration) *kvClient {
	transport := &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}
	return &kvClient{
		nodes:   nodes,
		current: nodes[0],
		http:    &http.Client{Timeout: timeout, Transport: transport},
	}
}

// notLeader is the body of a 421 answer.
type notLeader struct {
	Error      string  `json:"error"`
	LeaderID   *uint64 `json:"leader_id"`
	LeaderAddr *string `json:"leader_addr"`
}

// nextNode moves on from the current node to the one after it.
func (c *kvClient) nextNode() {
	for i, n := range c.nodes {
		if n == c.current {
			c.current = c.nodes[(i+1)%len(c.nodes)]
			return
		}
	}
	c.current = c.nodes[0]
}

// wasNotSent says whether err means the request never reached the server (nothing was
// executed: it is safe to send it again).
func wasNotSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// call POSTs body to path and decodes a 200 answer into out. It retries where the request
// certainly did not take effect (connection refused, 421 not-leader) until deadline; it
// returns errUnknown (wrapped) when the request was sent and its outcome is unknown
// (timeout, connection lost, 5xx), and another error for a 4xx the caller made.
func (c *kvClient) call(path string, body any, out any, deadline time.Time) error {
	payload, err := json.Marshal(body)
	if err != nil {
		return err
	}
	for {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: no node took the request before the deadline", errUnknown)
		}
		req, err := http.NewRequest(http.MethodPost, "http://"+c.current+path, bytes.NewReader(payload))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			if wasNotSent(err) {
				c.nextNode()
				time.Sleep(20 * time.Millisecond)
				continue
			}
			return fmt.Errorf("%w: %v", errUnknown, err)
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("%w: reading the answer: %v", errUnknown, err)
		}
		switch {
		case resp.StatusCode == http.StatusOK:
			return json.Unmarshal(data, out)
		case resp.StatusCode == http.StatusMisdirectedRequest:
			var nl notLeader
			_ = json.Unmarshal(data, &nl)
			if nl.LeaderAddr != nil && *nl.LeaderAddr != "" && *nl.LeaderAddr != c.current {
				c.current = *nl.LeaderAddr
			} else {
				// No leader known yet (an election is on): ask the next node shortly.
				c.nextNode()
				time.Sleep(50 * time.Millisecond)
			}
		case resp.StatusCode >= 500:
			return fmt.Errorf("%w: %s: %s", errUnknown, resp.Status, bytes.TrimSpace(data))
		default:
			return fmt.Errorf("%s %s: %s: %s", c.current, path, resp.Status, bytes.TrimSpace(data))
		}
	}
}

// put sets key to value.
func (c *kvClient) put(key, value string, deadline time.Time) error {
	var out struct {
		Index uint64 `json:"index"`
	}
	return c.call("/kv/put", map[string]string{"key": key, "value": value}, &out, deadline)
}

// del removes key.
func (c *kvClient) del(key string, deadline time.Time) error {
	var out struct {
		Index uint64 `json:"index"`
	}
	return c.call("/kv/delete", map[string]string{"key": key}, &out, deadline)
}

// get reads key linearizably; nil when absent.
func (c *kvClient) get(key string, deadline time.Time) (*string, error) {
	var out struct {
		Value *string `json:"value"`
	}
	if err := c.call("/kv/get", map[string]string{"key": key}, &out, deadline); err != nil {
		return nil, err
	}
	return out.Value, nil
}

// clusterStatus is the part of GET /cluster/status read here.
type clusterStatus struct {
	ID     uint64  `json:"id"`
	State  string  `json:"state"`
	Leader *uint64 `json:"leader"`
}

// status asks node for its view of the cluster.
func status(node string, timeout time.Duration) (*clusterStatus, error) {
	hc := http.Client{Timeout: timeout}
	resp, err := hc.Get("http://" + node + "/cluster/status")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s /cluster/status: %s", node, resp.Status)
	}
	var st clusterStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, err
	}
	return &st, nil
}

// waitForLeader polls nodes until one of them names a leader and the leader says it is
// one; it returns the leader's id.
func waitForLeader(nodes map[uint64]string, timeout time.Duration) (uint64, error) {
	end := time.Now().Add(timeout)
	for time.Now().Before(end) {
		for _, addr := range nodes {
			st, err := status(addr, time.Second)
			if err != nil || st.Leader == nil {
				continue
			}
			leaderAddr, ok := nodes[*st.Leader]
			if !ok {
				continue
			}
			if lst, err := status(leaderAddr, time.Second); err == nil && lst.Leader != nil && *lst.Leader == *st.Leader {
				return *st.Leader, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, fmt.Errorf("no leader within %v", timeout)
}
