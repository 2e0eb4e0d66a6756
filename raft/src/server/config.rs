//! A node's settings ([`ServeConfig`]) and their checks: who it is, where it listens, its
//! peers, security, fault injection and the Raft timings.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use super::ServeError;

/// One node's settings. [`ServeConfig::new`] gives the defaults; set the fields to change them.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// This node's id (a member of `peers` when `init` is set).
    pub id: u64,
    /// The address the HTTP server listens on.
    pub listen: SocketAddr,
    /// Every node of the cluster: id -> "host:port" (the same list on every node).
    pub peers: BTreeMap<u64, String>,
    /// Initialize the cluster with all `peers` as voters once they answer (a no-op when it is
    /// already initialized).
    pub init: bool,
    /// The bearer token clients and nodes must send (`Authorization: Bearer <token>`).
    pub token: Option<String>,
    /// The TLS certificate chain (PEM): this node's certificate, then the CA certificate that
    /// signed every node's. Nodes trust the certificates in it when they call each other.
    pub tls_cert: Option<PathBuf>,
    /// The TLS private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// Serve `POST /debug/isolate` (tests only).
    pub allow_fault_injection: bool,
    /// Build a snapshot every this many applied log entries; the log keeps as many entries
    /// behind the snapshot, so a follower further behind catches up by snapshot.
    pub snapshot_every_logs: u64,
    /// The leader's heartbeat interval, in milliseconds.
    pub heartbeat_ms: u64,
    /// The election timeout's lower bound, in milliseconds.
    pub election_timeout_min_ms: u64,
    /// The election timeout's upper bound, in milliseconds.
    pub election_timeout_max_ms: u64,
    /// How long a client request waits for a commit or a read index before it answers 503
    /// (its outcome is then unknown), in milliseconds.
    pub request_timeout_ms: u64,
    /// The largest client request body (a larger one is answered 413).
    pub max_body_bytes: usize,
    /// How many entries of grouped client writes the leader has proposed and not yet applied,
    /// at most. Writes that arrive while the leader appends one entry go together in the
    /// next (one append, so one fsync per node, for all of them).
    pub max_inflight_groups: usize,
}

impl ServeConfig {
    /// The defaults for node `id` listening on `listen`: no peers, no init, no token or TLS,
    /// no fault injection, a snapshot every 5000 entries, heartbeats every 250 ms, elections
    /// after 1 to 2 s, requests waiting up to 5 s, bodies up to 8 MiB, 8 groups of writes in
    /// flight.
    #[must_use]
    pub fn new(id: u64, listen: SocketAddr) -> ServeConfig {
        ServeConfig {
            id,
            listen,
            peers: BTreeMap::new(),
            init: false,
            token: None,
            tls_cert: None,
            tls_key: None,
            allow_fault_injection: false,
            snapshot_every_logs: 5000,
            heartbeat_ms: 250,
            election_timeout_min_ms: 1000,
            election_timeout_max_ms: 2000,
            request_timeout_ms: 5000,
            max_body_bytes: 8 << 20,
            max_inflight_groups: 8,
        }
    }

    /// The address other nodes reach this one at: its entry in `peers`, else `listen`.
    pub fn advertised_addr(&self) -> String {
        self.peers.get(&self.id).cloned().unwrap_or_else(|| self.listen.to_string())
    }

    /// Refuse settings that cannot work or are unsafe: a non-loopback `listen` without both a
    /// token and TLS, half a TLS pair, an `init` whose peers do not include this node, bad timings.
    pub fn validate(&self) -> Result<(), ServeError> {
        let config = |what: &str| Err(ServeError::Config { what: what.to_string() });
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return config("--tls-cert and --tls-key go together");
        }
        let secure = self.token.is_some() && self.tls_cert.is_some();
        if !self.listen.ip().is_loopback() && !secure {
            return Err(ServeError::Insecure { listen: self.listen });
        }
        if self.token.as_deref() == Some("") {
            return config("--token is empty");
        }
        if self.init && !self.peers.contains_key(&self.id) {
            return config("--init needs --peers to list this node's own id");
        }
        if self.snapshot_every_logs == 0 {
            return config("the snapshot interval must be at least 1 entry");
        }
        if self.max_body_bytes == 0 || self.request_timeout_ms == 0 {
            return config("the body limit and the request timeout must be positive");
        }
        if self.max_inflight_groups == 0 {
            return config("at least one group of writes must be allowed in flight");
        }
        Ok(())
    }

    /// openraft's configuration from these settings (checked by openraft).
    pub(crate) fn raft_config(&self) -> Result<Arc<openraft::Config>, ServeError> {
        let c = openraft::Config {
            cluster_name: "wisckey".to_string(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.election_timeout_min_ms,
            election_timeout_max: self.election_timeout_max_ms,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(self.snapshot_every_logs),
            max_in_snapshot_log_to_keep: self.snapshot_every_logs,
            // A snapshot chunk travels as JSON: openraft's 200 ms default is too short for
            // megabytes on a loaded machine.
            install_snapshot_timeout: 10_000,
            ..openraft::Config::default()
        };
        c.validate().map(Arc::new).map_err(|e| ServeError::Config { what: e.to_string() })
    }
}

/// Parse `--peers`: `1=127.0.0.1:21001,2=127.0.0.1:21002` -> {1: "127.0.0.1:21001", ...}.
pub fn parse_peers(s: &str) -> Result<BTreeMap<u64, String>, ServeError> {
    let mut peers = BTreeMap::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let bad = || ServeError::Config { what: format!("peer {item:?} is not ID=HOST:PORT") };
        let (id, addr) = item.split_once('=').ok_or_else(bad)?;
        let id: u64 = id.trim().parse().map_err(|_| bad())?;
        let addr = addr.trim();
        if addr.is_empty() || !addr.contains(':') {
            return Err(bad());
        }
        if peers.insert(id, addr.to_string()).is_some() {
            return Err(ServeError::Config { what: format!("peer id {id} is listed twice") });
        }
    }
    Ok(peers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_parse_and_bad_ones_are_refused() {
        let p = parse_peers("1=127.0.0.1:1, 2=h:2").expect("parses");
        assert_eq!(p.get(&2).map(String::as_str), Some("h:2"));
        assert!(parse_peers("1=a:1,1=b:2").is_err());
        assert!(parse_peers("x=a:1").is_err());
        assert!(parse_peers("1a:1").is_err());
    }

    #[test]
    fn non_loopback_without_token_and_tls_is_refused() {
        let c = ServeConfig::new(1, "0.0.0.0:1".parse().expect("addr"));
        assert!(matches!(c.validate(), Err(ServeError::Insecure { .. })));
        let c = ServeConfig::new(1, "127.0.0.1:1".parse().expect("addr"));
        assert!(c.validate().is_ok());
    }
}
