//! `wisckey serve`: one node of the replicated key-value server (openraft on a wisckey
//! database in `--dir`; the HTTP API is described in `wisckey_raft::server`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use wisckey::Options;
use wisckey_raft::server::{parse_peers, serve, ServeConfig};

use crate::bench::CliResult;

#[derive(Args)]
pub struct ServeArgs {
    /// This node's id.
    #[arg(long)]
    pub id: u64,
    /// Address to listen on (loopback unless --token and --tls-cert/--tls-key are given).
    #[arg(long)]
    pub listen: SocketAddr,
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
}

pub fn run(a: ServeArgs) -> CliResult {
    let mut config = ServeConfig::new(a.id, a.listen);
    config.peers = parse_peers(&a.peers)?;
    config.init = a.init;
    config.token = a.token;
    config.tls_cert = a.tls_cert;
    config.tls_key = a.tls_key;
    config.allow_fault_injection = a.allow_fault_injection;
    config.snapshot_every_logs = a.snapshot_every_logs;
    config.heartbeat_ms = a.heartbeat_ms;
    config.election_timeout_min_ms = a.election_timeout_min_ms;
    config.election_timeout_max_ms = a.election_timeout_max_ms;
    config.request_timeout_ms = a.request_timeout_ms;
    // Refuse a bad or unsafe configuration before touching the directory.
    config.validate()?;
    let (log, sm) = wisckey_raft::open(&a.dir, Options::default())?;
    let reader = Arc::new(sm.clone());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    eprintln!("wisckey serve: node {} listening on {}", config.id, config.listen);
    rt.block_on(serve(config, log, sm, reader))?;
    Ok(())
}
