//! The command-line flags of a node (`wisckey serve`, and the same flags for any other build
//! of the server), parsed by clap and turned into a checked [`ServeConfig`].

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use super::{parse_peers, ServeConfig, ServeError};

/// The flags of one node.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// This node's id.
    #[arg(long)]
    pub id: u64,
    /// Address to listen on (beyond loopback only with --token and --tls-cert/--tls-key).
    /// Default: loopback, on the port --peers gives this node's id (else 21001).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// The node's database directory (created if missing).
    #[arg(long)]
    pub dir: PathBuf,
    /// Every node of the cluster, the same on each: ID=HOST:PORT,ID=HOST:PORT,...
    #[arg(long, default_value = "")]
    pub peers: String,
    /// Initialize the cluster with all peers as voters once they answer (a no-op when it is
    /// already initialized).
    #[arg(long)]
    pub init: bool,
    /// Bearer token that clients and nodes must send (or the WISCKEY_TOKEN variable).
    #[arg(long, env = "WISCKEY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// TLS certificate chain (PEM): this node's certificate, then the CA that signed every
    /// node's (nodes trust the certificates in it when calling each other).
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// Serve POST /debug/isolate, which cuts this node off from its peers (tests only).
    #[arg(long)]
    pub allow_fault_injection: bool,
    /// Build a snapshot every this many log entries (and keep as many behind it).
    #[arg(long, default_value_t = 5000)]
    pub snapshot_every_logs: u64,
    /// Leader heartbeat interval in milliseconds.
    #[arg(long, default_value_t = 250)]
    pub heartbeat_ms: u64,
    /// Election timeout lower bound in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub election_timeout_min_ms: u64,
    /// Election timeout upper bound in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub election_timeout_max_ms: u64,
    /// How long a request waits for a commit or read index before answering 503.
    #[arg(long, default_value_t = 5000)]
    pub request_timeout_ms: u64,
    /// Entries of grouped client writes proposed and not yet applied, at most (writes that
    /// arrive while the leader appends one go together in the next).
    #[arg(long, default_value_t = 8)]
    pub max_inflight_groups: usize,
}

impl ServeArgs {
    /// The node's configuration, checked: a bad or unsafe one is refused here, before anything
    /// touches the directory.
    pub fn config(&self) -> Result<ServeConfig, ServeError> {
        let peers = parse_peers(&self.peers)?;
        let listen = self.listen.unwrap_or_else(|| default_listen(peers.get(&self.id)));
        let mut config = ServeConfig::new(self.id, listen);
        config.peers = peers;
        config.init = self.init;
        config.token = self.token.clone();
        config.tls_cert = self.tls_cert.clone();
        config.tls_key = self.tls_key.clone();
        config.allow_fault_injection = self.allow_fault_injection;
        config.snapshot_every_logs = self.snapshot_every_logs;
        config.heartbeat_ms = self.heartbeat_ms;
        config.election_timeout_min_ms = self.election_timeout_min_ms;
        config.election_timeout_max_ms = self.election_timeout_max_ms;
        config.request_timeout_ms = self.request_timeout_ms;
        config.max_inflight_groups = self.max_inflight_groups;
        config.validate()?;
        Ok(config)
    }
}

/// Where a node listens when not told: loopback (so an unconfigured node is never reachable
/// from another machine), on the port of its own `--peers` entry if that has one.
fn default_listen(own_peer: Option<&String>) -> SocketAddr {
    let port = own_peer.and_then(|a| a.rsplit_once(':')).and_then(|(_, p)| p.parse().ok()).unwrap_or(21001);
    SocketAddr::from(([127, 0, 0, 1], port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_not_told_where_to_listen_listens_on_loopback_at_its_peer_port() {
        assert_eq!(default_listen(Some(&"10.0.0.2:7002".to_string())), "127.0.0.1:7002".parse().unwrap());
        assert_eq!(default_listen(Some(&"node2.example:7003".to_string())), "127.0.0.1:7003".parse().unwrap());
        assert_eq!(default_listen(None), "127.0.0.1:21001".parse().unwrap());
        assert_eq!(default_listen(Some(&"no-port".to_string())), "127.0.0.1:21001".parse().unwrap());
    }
}
