//! The replicated server (`wisckey serve`) under faults, on loopback: real processes killed
//! with SIGKILL, a node restarted far behind (it catches up by snapshot), a partition through
//! the fault switch (`/debug/isolate`), disk errors on one node (in-process, over the
//! fault-injecting filesystem), and bad input. Every acknowledged write is checked against
//! the model of what was acknowledged.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wisckey::fs::{FaultFs, FaultKind, FaultOp, PosixFs};
use wisckey_raft::server::{serve_until, ServeConfig};

const BIN: &str = env!("CARGO_BIN_EXE_wisckey");
/// Fast Raft timings for loopback (the product's defaults are slower).
const TIMINGS: [&str; 8] = [
    "--heartbeat-ms",
    "100",
    "--election-timeout-min-ms",
    "500",
    "--election-timeout-max-ms",
    "1000",
    "--request-timeout-ms",
    "2000",
];
/// How long a new leader may take: far above the election timeout, for a loaded machine.
const ELECTION_BOUND: Duration = Duration::from_secs(10);

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").port()
}

/// One HTTP/1.1 exchange over a fresh connection: (status, body); status 0 when the node
/// cannot be reached.
fn http(addr: &str, method: &str, path: &str, body: &[u8], headers: &[(&str, &str)]) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect_timeout(&addr.parse().expect("addr"), Duration::from_secs(2)) else {
        return (0, "connect failed".into());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(15)));
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    if s.write_all(head.as_bytes()).and_then(|()| s.write_all(body)).is_err() {
        return (0, "write failed".into());
    }
    let mut raw = Vec::new();
    if s.read_to_end(&mut raw).is_err() && raw.is_empty() {
        return (0, "read failed".into());
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

fn post(addr: &str, path: &str, body: &Value) -> (u16, Value) {
    let (status, text) = http(addr, "POST", path, body.to_string().as_bytes(), &[]);
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn status(addr: &str) -> Option<Value> {
    let (code, text) = http(addr, "GET", "/cluster/status", b"", &[]);
    (code == 200).then(|| serde_json::from_str(&text).ok()).flatten()
}

/// Send (`send` to an address) to whichever node leads, starting at `addr`: follows 421s to
/// the leader they name and retries while the cluster elects one, answers 503 or cannot be
/// reached (status 0); (the node that answered, status, body).
fn via_leader(addr: &str, what: &str, send: impl Fn(&str) -> (u16, Value)) -> (String, u16, Value) {
    let deadline = Instant::now() + ELECTION_BOUND;
    let mut addr = addr.to_string();
    loop {
        let (code, answer) = send(&addr);
        if code != 421 && code != 503 && code != 0 {
            return (addr, code, answer);
        }
        assert!(Instant::now() < deadline, "{what} never reached a leader: {code} {answer}");
        match answer["leader_addr"].as_str() {
            Some(leader) => addr = leader.to_string(),
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// A cluster of `wisckey serve` processes (node index i has id i + 1); killed on drop.
struct Cluster {
    _dir: tempfile::TempDir,
    root: PathBuf,
    addrs: Vec<String>,
    children: Vec<Option<Child>>,
    peers: String,
    extra: Vec<String>,
}

impl Cluster {
    /// Start `n` nodes; the first initializes the cluster. `in_process` names node indexes
    /// the test runs itself (not spawned here).
    fn start(n: usize, extra: &[&str], in_process: &[usize]) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let addrs: Vec<String> = (0..n).map(|_| format!("127.0.0.1:{}", free_port())).collect();
        let peers = addrs.iter().enumerate().map(|(i, a)| format!("{}={a}", i + 1)).collect::<Vec<_>>().join(",");
        let mut c = Cluster {
            root: dir.path().to_path_buf(),
            _dir: dir,
            addrs,
            children: (0..n).map(|_| None).collect(),
            peers,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        for i in (0..n).filter(|i| !in_process.contains(i)) {
            c.spawn(i);
        }
        c
    }

    fn node_dir(&self, i: usize) -> PathBuf {
        self.root.join(format!("node{}", i + 1))
    }

    /// (Re)start node `i`; its stderr goes to `node<id>.log` beside its directory.
    fn spawn(&mut self, i: usize) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.root.join(format!("node{}.log", i + 1)))
            .expect("log file");
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--id", &(i + 1).to_string(), "--listen", &self.addrs[i], "--peers", &self.peers]);
        cmd.arg("--dir").arg(self.node_dir(i)).args(TIMINGS).args(&self.extra);
        if i == 0 {
            cmd.arg("--init");
        }
        let child = cmd.stdout(Stdio::null()).stderr(log).spawn().expect("spawn wisckey serve");
        self.children[i] = Some(child);
    }

    /// SIGKILL node `i`.
    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The node among `among` that is leader with the highest term, once there is one.
    fn wait_leader(&self, among: &[usize], within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            let best = among
                .iter()
                .filter_map(|&i| status(&self.addrs[i]).map(|s| (i, s)))
                .filter(|(_, s)| s["state"] == "Leader" && s["isolated"] == false)
                .max_by_key(|(_, s)| s["term"].as_u64());
            if let Some((i, _)) = best {
                return i;
            }
            assert!(Instant::now() < deadline, "no leader among {among:?} within {within:?}; logs in {:?}", self.root);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Write through node `at`, following 421s to the leader and retrying while the cluster
    /// elects one; the log index once acknowledged.
    fn put(&self, at: usize, key: &str, value: &str) -> u64 {
        let deadline = Instant::now() + ELECTION_BOUND;
        let mut addr = self.addrs[at].clone();
        loop {
            let (code, body) = post(&addr, "/kv/put", &json!({"key": key, "value": value}));
            if code == 200 {
                return body["index"].as_u64().expect("index");
            }
            assert!(Instant::now() < deadline, "put {key} not acknowledged: {code} {body}");
            if let Some(leader) = body["leader_addr"].as_str() {
                addr = leader.to_string();
            } else {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// A linearizable read at node `at` (which must lead).
    fn get(&self, at: usize, key: &str) -> Option<String> {
        let (code, body) = post(&self.addrs[at], "/kv/get", &json!({"key": key}));
        assert_eq!(code, 200, "get {key} at node {}: {body}", at + 1);
        body["value"].as_str().map(str::to_string)
    }

    /// Wait until node `at`'s own state (a stale read) holds exactly `model`.
    fn wait_caught_up(&self, at: usize, model: &BTreeMap<String, String>, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let (code, body) = post(&self.addrs[at], "/kv/scan", &json!({"start": "", "stale": true}));
            let items: BTreeMap<String, String> = body["items"]
                .as_array()
                .map(|a| {
                    a.iter().filter_map(|p| Some((p[0].as_str()?.to_string(), p[1].as_str()?.to_string()))).collect()
                })
                .unwrap_or_default();
            if code == 200 && &items == model {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "node {} did not catch up within {within:?}: {code}, has {} of {} pairs",
                at + 1,
                items.len(),
                model.len()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// POST to whichever node leads, starting at node `at` (`via_leader`); (the node that
    /// answered, status, body).
    fn post_leader(&self, at: usize, path: &str, body: &Value) -> (String, u16, Value) {
        via_leader(&self.addrs[at], path, |addr| post(addr, path, body))
    }

    fn metric(&self, at: usize, name: &str) -> Option<i64> {
        let (_, text) = http(&self.addrs[at], "GET", "/metrics", b"", &[]);
        let line = text.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))?;
        line.rsplit(' ').next()?.parse().ok()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }
}

fn others(n: usize, not: usize) -> Vec<usize> {
    (0..n).filter(|&i| i != not).collect()
}

#[test]
fn leader_killed_with_sigkill_a_new_leader_is_elected_and_no_acknowledged_write_is_lost() {
    let mut c = Cluster::start(3, &[], &[]);
    let leader = c.wait_leader(&[0, 1, 2], ELECTION_BOUND);
    let mut model = BTreeMap::new();
    for i in 0..30 {
        let (k, v) = (format!("k{i:03}"), format!("v{i}"));
        c.put(leader, &k, &v);
        model.insert(k, v);
    }
    // A batch is applied whole: a put and a delete in one entry.
    let ops = json!({"ops": [{"op": "put", "key": "batch", "value": "B"}, {"op": "delete", "key": "k000"}]});
    let (code, body) = post(&c.addrs[leader], "/kv/batch", &ops);
    assert_eq!(code, 200, "batch: {body}");
    model.insert("batch".to_string(), "B".to_string());
    model.remove("k000");
    // A linearizable scan of a range, bounded.
    let (code, body) = post(&c.addrs[leader], "/kv/scan", &json!({"start": "k001", "end": "k010", "limit": 3}));
    assert_eq!(code, 200, "scan: {body}");
    assert_eq!(body["items"], json!([["k001", "v1"], ["k002", "v2"], ["k003", "v3"]]));
    c.kill(leader);
    let killed_at = Instant::now();
    let survivors = others(3, leader);
    let new_leader = c.wait_leader(&survivors, ELECTION_BOUND);
    assert_ne!(new_leader, leader);
    eprintln!("new leader after {:?}", killed_at.elapsed());
    for (k, v) in &model {
        assert_eq!(c.get(new_leader, k).as_ref(), Some(v), "acknowledged {k} lost");
    }
    for i in 30..40 {
        let (k, v) = (format!("k{i:03}"), format!("v{i}"));
        c.put(new_leader, &k, &v);
        model.insert(k, v);
    }
    // The killed node comes back and catches up by log.
    c.spawn(leader);
    c.wait_caught_up(leader, &model, Duration::from_secs(15));
}

#[test]
fn leader_killed_and_restarted_at_once_stands_for_election_and_reads_see_every_acknowledged_write() {
    let mut c = Cluster::start(3, &[], &[]);
    let leader = c.wait_leader(&[0, 1, 2], ELECTION_BOUND);
    let term = |c: &Cluster, i: usize| status(&c.addrs[i]).and_then(|s| s["term"].as_u64());
    let before = term(&c, leader).expect("leader's term");
    let mut model = BTreeMap::new();
    for i in 0..20 {
        let (k, v) = (format!("k{i:03}"), format!("v{i}"));
        c.put(leader, &k, &v);
        model.insert(k, v);
    }
    // Back before the others' election timeout: openraft 0.9 alone would restore it as leader of
    // the same term, with a read index that may lie before the writes it acknowledged.
    c.kill(leader);
    c.spawn(leader);
    let now = c.wait_leader(&[0, 1, 2], ELECTION_BOUND);
    let after = term(&c, now).expect("new leader's term");
    assert!(after > before, "node {} leads term {after}, the term before the restart", now + 1);
    for (k, v) in &model {
        assert_eq!(c.get(now, k).as_ref(), Some(v), "acknowledged {k} not read after the restart");
    }
}

#[test]
fn node_restarted_far_behind_catches_up_by_snapshot() {
    let mut c = Cluster::start(3, &["--snapshot-every-logs", "10"], &[]);
    let leader = c.wait_leader(&[0, 1, 2], ELECTION_BOUND);
    let behind = others(3, leader)[0];
    let mut model = BTreeMap::new();
    c.put(leader, "first", "1");
    model.insert("first".to_string(), "1".to_string());
    c.wait_caught_up(behind, &model, Duration::from_secs(10));
    let behind_last = status(&c.addrs[behind]).expect("status")["last_log_index"].as_i64().expect("index");
    c.kill(behind);
    for i in 0..80 {
        let (k, v) = (format!("key{i:03}"), format!("value{i}"));
        c.put(leader, &k, &v);
        model.insert(k, v);
    }
    // The leader's log no longer holds what the stopped node needs: only a snapshot can help.
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.metric(leader, "raft_purged_index").unwrap_or(-1) <= behind_last {
        assert!(Instant::now() < deadline, "the leader never purged its log past {behind_last}");
        std::thread::sleep(Duration::from_millis(100));
    }
    c.spawn(behind);
    c.wait_caught_up(behind, &model, Duration::from_secs(20));
    let snap = status(&c.addrs[behind]).expect("status")["snapshot"].as_i64().unwrap_or(-1);
    assert!(snap > behind_last, "the restarted node holds no newer snapshot ({snap} <= {behind_last})");
}

#[test]
fn partitioned_leader_cannot_commit_and_the_cluster_heals() {
    let c = Cluster::start(3, &["--allow-fault-injection"], &[]);
    let old = c.wait_leader(&[0, 1, 2], ELECTION_BOUND);
    let mut model = BTreeMap::new();
    c.put(old, "before", "b");
    model.insert("before".to_string(), "b".to_string());
    let (code, _) = post(&c.addrs[old], "/debug/isolate", &json!({"isolated": true}));
    assert_eq!(code, 200);
    // The minority side cannot commit: it times out (or has learned it no longer leads).
    let (code, body) = post(&c.addrs[old], "/kv/put", &json!({"key": "minority", "value": "m"}));
    assert!(code == 503 || code == 421, "a write on the isolated leader answered {code} {body}");
    let (code, body) = post(&c.addrs[old], "/kv/get", &json!({"key": "before"}));
    assert!(code == 503 || code == 421, "a linearizable read on the isolated leader answered {code} {body}");
    let majority = others(3, old);
    let new = c.wait_leader(&majority, ELECTION_BOUND);
    c.put(new, "majority", "M");
    model.insert("majority".to_string(), "M".to_string());
    let (code, _) = post(&c.addrs[old], "/debug/isolate", &json!({"isolated": false}));
    assert_eq!(code, 200);
    for i in 0..3 {
        c.wait_caught_up(i, &model, Duration::from_secs(15));
    }
    let leader = c.wait_leader(&[0, 1, 2], ELECTION_BOUND);
    assert_eq!(c.get(leader, "minority"), None, "a write the minority never committed appeared");
}

/// Many clients writing at once: the leader groups their writes into shared entries. Each
/// put and each batch (all-or-nothing, spliced whole into a group) is acknowledged, and every
/// node ends with exactly the last acknowledged value of each key.
#[test]
fn concurrent_puts_and_batches_grouped_into_shared_entries_are_each_applied_on_every_node() {
    let c = Cluster::start(3, &[], &[]);
    let leader = c.wait_leader(&[0, 1, 2], ELECTION_BOUND);
    c.put(leader, "warm", "up");
    let addr = c.addrs[leader].clone();
    let writers: Vec<_> = (0..12)
        .map(|w| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut mine = BTreeMap::new();
                for n in 0..8 {
                    let (path, body) = if n % 4 == 3 {
                        // A batch: its own key pair, plus a delete of the pair's first key.
                        let ops = json!([{"op": "put", "key": format!("w{w}-b{n}"), "value": "gone"},
                            {"op": "put", "key": format!("w{w}-c{n}"), "value": format!("{w}.{n}")},
                            {"op": "delete", "key": format!("w{w}-b{n}")}]);
                        mine.insert(format!("w{w}-c{n}"), format!("{w}.{n}"));
                        ("/kv/batch", json!({ "ops": ops }))
                    } else {
                        // Each writer overwrites its own key: the last put must win.
                        mine.insert(format!("w{w}"), format!("{w}.{n}"));
                        ("/kv/put", json!({"key": format!("w{w}"), "value": format!("{w}.{n}")}))
                    };
                    let (code, answer) = post(&addr, path, &body);
                    assert_eq!(code, 200, "writer {w} op {n}: {answer}");
                }
                mine
            })
        })
        .collect();
    let mut model = BTreeMap::from([("warm".to_string(), "up".to_string())]);
    for w in writers {
        model.extend(w.join().expect("writer"));
    }
    for (k, v) in &model {
        assert_eq!(c.get(leader, k).as_deref(), Some(v.as_str()), "{k}");
    }
    for i in 0..3 {
        c.wait_caught_up(i, &model, ELECTION_BOUND);
    }
}

/// Grow the cluster by a node the init did not name, and shrink it by one: the new node is
/// added as a learner (answered once it has caught up), made a voter, and then one of the
/// original followers is removed and killed; writes go on committing with the new majority.
#[test]
fn a_learner_catches_up_then_a_membership_change_makes_it_a_voter_that_replaces_a_node() {
    let mut c = Cluster::start(3, &[], &[]);
    let leader = c.wait_leader(&[0, 1, 2], ELECTION_BOUND);
    let mut model = BTreeMap::new();
    for i in 0..20 {
        let (k, v) = (format!("k{i:03}"), format!("v{i}"));
        c.put(leader, &k, &v);
        model.insert(k, v);
    }
    c.addrs.push(format!("127.0.0.1:{}", free_port()));
    c.children.push(None);
    c.spawn(3);
    let learner = json!({"node_id": 4, "addr": c.addrs[3]});
    let (at, code, body) = c.post_leader(leader, "/cluster/add-learner", &learner);
    assert_eq!(code, 200, "add learner: {body}");
    c.wait_caught_up(3, &model, ELECTION_BOUND);
    let voters = |addr: &str| status(addr).map(|s| s["membership"]["voters"].clone());
    assert_eq!(voters(&at), Some(json!([1, 2, 3])), "a learner is not a voter");
    let (at, code, body) = c.post_leader(leader, "/cluster/change-membership", &json!({"members": [1, 2, 3, 4]}));
    assert_eq!(code, 200, "promote: {body}");
    assert_eq!(voters(&at), Some(json!([1, 2, 3, 4])));
    let gone = others(3, leader)[0];
    let members: Vec<usize> = (1..=4).filter(|&id| id != gone + 1).collect();
    let (at, code, body) = c.post_leader(leader, "/cluster/change-membership", &json!({ "members": members }));
    assert_eq!(code, 200, "remove node {}: {body}", gone + 1);
    assert_eq!(voters(&at), Some(json!(members)));
    c.kill(gone);
    let leader = c.wait_leader(&[0, 1, 2, 3].into_iter().filter(|&i| i != gone).collect::<Vec<_>>(), ELECTION_BOUND);
    // Three voters, one of them the new node: the leader and one other make a majority.
    for i in 20..30 {
        let (k, v) = (format!("k{i:03}"), format!("v{i}"));
        c.put(leader, &k, &v);
        model.insert(k, v);
    }
    c.wait_caught_up(3, &model, ELECTION_BOUND);
    for (k, v) in &model {
        assert_eq!(c.get(leader, k).as_ref(), Some(v), "{k}");
    }
}

/// A snapshot stream that does not verify (here: bytes that are no stream) is refused with a
/// clear error when its last chunk arrives; nothing is installed, no incoming file is left,
/// and the node goes on replicating (openraft would stop on the storage error an install of it
/// raises, so the stream is checked before it gets there).
#[test]
fn a_snapshot_that_does_not_verify_is_refused_and_the_node_keeps_replicating() {
    let c = Cluster::start(3, &[], &[]);
    let leader = c.wait_leader(&[0, 1, 2], ELECTION_BOUND);
    let mut model = BTreeMap::new();
    c.put(leader, "before", "b");
    model.insert("before".to_string(), "b".to_string());
    let follower = others(3, leader)[0];
    c.wait_caught_up(follower, &model, ELECTION_BOUND);
    // Sent as from the leader the follower knows, at its term (an election in between makes
    // the vote stale and the follower ignores the request: then try again).
    let deadline = Instant::now() + ELECTION_BOUND;
    let (applied, code, body) = loop {
        let st = status(&c.addrs[follower]).expect("follower status");
        let (term, applied) = (st["term"].as_u64().expect("term"), st["last_applied"].as_u64().expect("applied"));
        let from = st["leader"].as_u64().unwrap_or(leader as u64 + 1);
        let vote = json!({"leader_id": {"term": term, "node_id": from}, "committed": true});
        let last = json!({"leader_id": {"term": term, "node_id": from}, "index": applied + 100});
        let membership = json!({"log_id": null, "membership": {"configs": [], "nodes": {}}});
        let req = json!({
            "vote": vote,
            "meta": {"last_log_id": last, "last_membership": membership, "snapshot_id": "forged-1"},
            "offset": 0,
            "data": b"these bytes are not a snapshot stream".to_vec(),
            "done": true,
        });
        let (code, body) = http(&c.addrs[follower], "POST", "/raft/snapshot", req.to_string().as_bytes(), &[]);
        if code != 200 || Instant::now() > deadline {
            break (applied, code, body);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(code, 422, "a stream that does not verify: {body}");
    assert!(body.contains("does not verify"), "unclear error: {body}");
    let st = status(&c.addrs[follower]).expect("the follower still answers");
    assert_eq!(st["error"], Value::Null, "Raft stopped on the follower: {st}");
    assert_eq!(st["last_applied"].as_u64(), Some(applied), "something was installed: {st}");
    let incoming: Vec<_> = std::fs::read_dir(c.node_dir(follower).join("raft-snapshots"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(!incoming.iter().any(|n| n.to_string_lossy().starts_with("incoming")), "left behind: {incoming:?}");
    for i in 0..10 {
        let (k, v) = (format!("after{i}"), format!("a{i}"));
        c.put(leader, &k, &v);
        model.insert(k, v);
    }
    c.wait_caught_up(follower, &model, ELECTION_BOUND);
    // The follower's engine and Raft figures are served (metrics of both kinds).
    for name in ["wisckey_user_bytes_written", "wisckey_log_bytes_written", "raft_last_applied_index"] {
        assert!(c.metric(follower, name).is_some_and(|v| v > 0), "{name} missing or zero on the follower");
    }
    let put_at = c.put(leader, "last", "l") as i64;
    assert!(c.metric(leader, "raft_commit_index").is_some_and(|v| v >= put_at), "the leader's commit index");
    let (_, text) = http(&c.addrs[leader], "GET", "/metrics", b"", &[]);
    for line in ["wisckey_write_amplification ", "wisckey_gc_stall_micros ", "raft_follower_lag_entries{follower="] {
        assert!(text.lines().any(|l| l.starts_with(line)), "no {line:?} line in the leader's metrics");
    }
}

/// A CA and a certificate for 127.0.0.1 signed by it, as `--tls-cert` (the node's certificate
/// followed by the CA's) and `--tls-key` files in `dir`; the CA's PEM for clients to trust.
fn test_certificates(dir: &std::path::Path) -> (PathBuf, PathBuf, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "wisckey test CA");
    let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
    let node_key = KeyPair::generate().expect("node key");
    let mut node_params = CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("node params");
    node_params.distinguished_name.push(DnType::CommonName, "127.0.0.1");
    let node = node_params.signed_by(&node_key, &ca, &ca_key).expect("node certificate");
    let (chain, key) = (dir.join("chain.pem"), dir.join("key.pem"));
    std::fs::write(&chain, format!("{}{}", node.pem(), ca.pem())).expect("write chain");
    std::fs::write(&key, node_key.serialize_pem()).expect("write key");
    (chain, key, ca.pem())
}

/// Nodes serving TLS with a shared token, as they must beyond loopback: they elect a leader
/// and replicate over HTTPS (each trusting the CA in its chain), a client that trusts the CA
/// and sends the token writes and reads, and one without the token, or speaking plain HTTP, is
/// refused.
#[test]
fn nodes_on_tls_with_a_token_elect_and_replicate_and_refuse_clients_without_either() {
    let certs = tempfile::tempdir().expect("tempdir");
    let (chain, key, ca) = test_certificates(certs.path());
    let (chain, key) = (chain.to_string_lossy().into_owned(), key.to_string_lossy().into_owned());
    let c = Cluster::start(3, &["--token", "s3cret", "--tls-cert", &chain, "--tls-key", &key], &[]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).expect("CA"))
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let call = |addr: &str, path: &str, body: Option<Value>, token: bool| {
        let url = format!("https://{addr}{path}");
        let mut req = match body {
            Some(b) => client.post(url).json(&b),
            None => client.get(url),
        };
        if token {
            req = req.bearer_auth("s3cret");
        }
        rt.block_on(async {
            let resp = req.send().await.map_err(|e| e.to_string())?;
            let code = resp.status().as_u16();
            Ok::<_, String>((code, resp.json::<Value>().await.unwrap_or(Value::Null)))
        })
    };
    let deadline = Instant::now() + ELECTION_BOUND;
    let leader = loop {
        let leads = |a: &String| call(a, "/cluster/status", None, true).is_ok_and(|(_, s)| s["state"] == "Leader");
        if let Some(a) = c.addrs.iter().find(|a| leads(a)) {
            break a.clone();
        }
        assert!(Instant::now() < deadline, "no leader over TLS; logs in {:?}", c.root);
        std::thread::sleep(Duration::from_millis(100));
    };
    // Through whichever node leads (following 421s: an election may move it meanwhile).
    let to_leader = |path: &str, body: Value| {
        let send = |addr: &str| call(addr, path, Some(body.clone()), true).unwrap_or((0, Value::Null));
        let (_, code, answer) = via_leader(&leader, &format!("{path} over TLS"), send);
        (code, answer)
    };
    let (code, body) = to_leader("/kv/put", json!({"key": "k", "value": "over tls"}));
    assert_eq!(code, 200, "put: {body}");
    let (code, body) = to_leader("/kv/get", json!({"key": "k"}));
    assert_eq!((code, body["value"].as_str()), (200, Some("over tls")), "{body}");
    for addr in &c.addrs {
        let deadline = Instant::now() + ELECTION_BOUND;
        while call(addr, "/kv/get", Some(json!({"key": "k", "stale": true})), true)
            .map_or(true, |(_, b)| b["value"].as_str() != Some("over tls"))
        {
            assert!(Instant::now() < deadline, "{addr} never received the write over TLS");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let (code, _) = call(&leader, "/kv/get", Some(json!({"key": "k"})), false).expect("a TLS answer");
    assert_eq!(code, 401, "no token");
    let (code, answer) = http(&leader, "GET", "/cluster/status", b"", &[("Authorization", "Bearer s3cret")]);
    assert_eq!(code, 0, "plain HTTP to a TLS node got an HTTP answer: {answer}");
}

#[test]
fn bad_input_gets_clear_errors_and_the_node_keeps_serving() {
    let c = Cluster::start(1, &["--token", "s3cret"], &[]);
    let addr = c.addrs[0].clone();
    let auth = [("Authorization", "Bearer s3cret")];
    let deadline = Instant::now() + ELECTION_BOUND;
    while http(&addr, "GET", "/cluster/status", b"", &auth).0 != 200 {
        assert!(Instant::now() < deadline, "node never answered");
        std::thread::sleep(Duration::from_millis(50));
    }
    let put = br#"{"key":"a","value":"1"}"#;
    assert_eq!(http(&addr, "POST", "/kv/put", put, &[]).0, 401, "no token");
    assert_eq!(http(&addr, "POST", "/kv/put", put, &[("Authorization", "Bearer wrong")]).0, 401, "wrong token");
    assert_eq!(http(&addr, "POST", "/raft/vote", b"{}", &[]).0, 401, "Raft RPCs need the token too");
    let (code, body) = http(&addr, "POST", "/kv/put", b"{\"key\": ", &auth);
    assert_eq!(code, 400, "truncated JSON: {body}");
    assert!(body.contains("error"), "{body}");
    assert_eq!(http(&addr, "POST", "/kv/put", br#"{"key":"a"}"#, &auth).0, 400, "missing value");
    assert_eq!(http(&addr, "POST", "/kv/put", br#"{"key":"","value":"x"}"#, &auth).0, 400, "empty key");
    let bad_op = br#"{"ops":[{"op":"merge","key":"a","value":"x"}]}"#;
    assert_eq!(http(&addr, "POST", "/kv/batch", bad_op, &auth).0, 400, "unknown batch op");
    let empty_key = br#"{"ops":[{"op":"put","key":"a","value":"x"},{"op":"delete","key":""}]}"#;
    assert_eq!(http(&addr, "POST", "/kv/batch", empty_key, &auth).0, 400, "empty key in a batch");
    assert_eq!(http(&addr, "POST", "/debug/isolate", br#"{"isolated":true}"#, &auth).0, 404, "no fault injection");
    assert_eq!(http(&addr, "GET", "/nope", b"", &auth).0, 404);
    // 9 MiB against an 8 MiB limit.
    let big = format!(r#"{{"key":"big","value":"{}"}}"#, "x".repeat(9 << 20));
    assert_eq!(http(&addr, "POST", "/kv/put", big.as_bytes(), &auth).0, 413, "oversized body");
    // A change to an unknown node id is refused with openraft's typed error.
    let (code, body) = http(&addr, "POST", "/cluster/change-membership", br#"{"members":[1,99]}"#, &auth);
    assert_eq!(code, 400, "unknown node: {body}");
    // A Raft RPC from a stale term is answered with the node's higher vote, not applied.
    let wait = Instant::now() + ELECTION_BOUND;
    while !status_with(&addr, &auth).is_some_and(|s| s["state"] == "Leader") {
        assert!(Instant::now() < wait, "single node never led");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stale = json!({"vote": {"leader_id": {"term": 0, "node_id": 7}, "committed": true},
        "prev_log_id": null, "leader_commit": null, "entries": []});
    let (code, body) = http(&addr, "POST", "/raft/append", stale.to_string().as_bytes(), &auth);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("HigherVote"), "a stale append was not refused: {body}");
    // After all that the node still serves.
    let (code, body) = http(&addr, "POST", "/kv/put", put, &auth);
    assert_eq!(code, 200, "{body}");
    let (code, body) = http(&addr, "POST", "/kv/get", br#"{"key":"a"}"#, &auth);
    assert_eq!((code, body.contains(r#""value":"1""#)), (200, true), "{body}");
    drop(c);

    // Beyond loopback without token and TLS the server refuses to start.
    for extra in [&[][..], &["--token", "t"][..]] {
        let out = Command::new(BIN)
            .args(["serve", "--id", "1", "--listen", "0.0.0.0:0", "--dir"])
            .arg(std::env::temp_dir().join("wisckey-serve-never-created"))
            .args(extra)
            .output()
            .expect("run wisckey serve");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "started on 0.0.0.0 with {extra:?}");
        assert!(err.contains("refusing to listen on 0.0.0.0"), "unclear refusal: {err}");
    }
}

fn status_with(addr: &str, headers: &[(&str, &str)]) -> Option<Value> {
    let (code, text) = http(addr, "GET", "/cluster/status", b"", headers);
    (code == 200).then(|| serde_json::from_str(&text).ok()).flatten()
}

/// Node 3 runs in this process over a filesystem that starts failing its writes.
struct InProcessNode {
    stop: tokio::sync::oneshot::Sender<()>,
    done: tokio::task::JoinHandle<()>,
}

fn start_in_process(rt: &tokio::runtime::Runtime, c: &Cluster, i: usize, fs: &Arc<FaultFs>) -> InProcessNode {
    let options = wisckey::Options::default().vfs(fs.clone());
    let dir = c.node_dir(i);
    // A node that just stopped may still hold the database for a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (log, sm) = loop {
        match wisckey_raft::open(&dir, options.clone()) {
            Ok(stores) => break stores,
            Err(e) => assert!(Instant::now() < deadline, "reopen {}: {e}", dir.display()),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let reader = Arc::new(sm.clone());
    let listen: SocketAddr = c.addrs[i].parse().expect("addr");
    let mut config = ServeConfig::new(i as u64 + 1, listen);
    config.peers = wisckey_raft::server::parse_peers(&c.peers).expect("peers");
    config.heartbeat_ms = 100;
    // Slow to stand for election, so a spawned node leads.
    config.election_timeout_min_ms = 3000;
    config.election_timeout_max_ms = 4000;
    config.request_timeout_ms = 2000;
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let done = rt.spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        if let Err(e) = serve_until(config, log, sm, reader, shutdown).await {
            eprintln!("in-process node stopped: {e}");
        }
    });
    InProcessNode { stop, done }
}

#[test]
fn disk_errors_on_one_node_stop_it_and_the_rest_go_on() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let c = Cluster::start(3, &[], &[2]);
    let fs = Arc::new(FaultFs::new(Arc::new(PosixFs::new()), 7));
    let node = start_in_process(&rt, &c, 2, &fs);
    let leader = c.wait_leader(&[0, 1], ELECTION_BOUND);
    let mut model = BTreeMap::new();
    for i in 0..10 {
        let (k, v) = (format!("a{i}"), format!("{i}"));
        c.put(leader, &k, &v);
        model.insert(k, v);
    }
    c.wait_caught_up(2, &model, Duration::from_secs(10));
    // The disk under node 3 fails every write and sync from now on.
    fs.fail_always(FaultOp::Append, FaultKind::Io);
    fs.fail_always(FaultOp::Sync, FaultKind::Io);
    for i in 10..30 {
        let (k, v) = (format!("a{i}"), format!("{i}"));
        c.put(leader, &k, &v);
        model.insert(k, v);
    }
    // The node reports its storage error and refuses writes; it neither crashes the process
    // nor answers with data it could not store.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = status(&c.addrs[2]).expect("the failed node still answers");
        if s["error"].is_string() {
            break;
        }
        assert!(Instant::now() < deadline, "node 3 never reported its disk errors: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, body) = post(&c.addrs[2], "/kv/put", &json!({"key": "x", "value": "y"}));
    assert!(code == 503 || code == 421, "a write to the failed node answered {code} {body}");
    // The disk is replaced (faults cleared) and the node restarted: it recovers what it had
    // and catches up on the rest.
    let _ = node.stop.send(());
    rt.block_on(node.done).expect("node task");
    fs.clear_faults();
    let node = start_in_process(&rt, &c, 2, &fs);
    c.wait_caught_up(2, &model, Duration::from_secs(20));
    let _ = node.stop.send(());
    rt.block_on(node.done).expect("node task");
}
