//! One node of the replicated key-value server: openraft over HTTP/JSON (axum), with the
//! client API (`/kv/*`), the management API (`/cluster/*`), Prometheus metrics (`/metrics`),
//! the Raft RPCs between nodes (`/raft/*`) and, when allowed, a fault switch that cuts the
//! node off from its peers (`/debug/isolate`). [`serve`] is generic over the log and state
//! machine stores, so a build on other stores reuses all of it; [`KvRead`] is what the HTTP
//! layer reads from a node's applied state.
//!
//! Security: a node binds to loopback unless it is given a bearer token and a TLS certificate
//! and key (rustls); [`ServeConfig::validate`] refuses anything else.

mod api;
mod args;
mod auth;
mod config;
mod metrics;
mod network;
mod proposer;
mod wisckey_read;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use axum_server::accept::NoDelayAcceptor;
use openraft::storage::{RaftLogStorage, RaftStateMachine};

use crate::TypeConfig;

pub use args::ServeArgs;
pub use config::{parse_peers, ServeConfig};

/// What the HTTP layer reads from a node's applied state (each store implements it; wisckey's
/// [`crate::StateMachineStore`] does).
pub trait KvRead: Send + Sync + 'static {
    /// The value of `key` in the applied state, `None` when absent.
    fn get(&self, key: &str) -> Result<Option<String>, String>;
    /// Pairs with start <= key < end (end None = unbounded), at most `limit`, key order.
    fn scan(&self, start: &str, end: Option<&str>, limit: usize) -> Result<Vec<(String, String)>, String>;
    /// Engine statistics as Prometheus text-format lines (may be empty).
    fn metrics_text(&self) -> String;
}

/// Why a node could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// A setting is missing or contradicts another.
    #[error("bad configuration: {what}")]
    Config {
        /// What is wrong.
        what: String,
    },
    /// A non-loopback address without both a token and TLS.
    #[error(
        "refusing to listen on {listen}: beyond loopback a node needs --token and --tls-cert/--tls-key \
         (bind to 127.0.0.1 for a local cluster)"
    )]
    Insecure {
        /// The address asked for.
        listen: SocketAddr,
    },
    /// The TLS certificate or key could not be loaded.
    #[error("TLS: cannot load {path}: {reason}")]
    Tls {
        /// The certificate or key file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The listening socket could not be bound or the server failed.
    #[error("cannot serve on {listen}: {source}")]
    Io {
        /// The address.
        listen: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// openraft could not start or stopped with a fatal error.
    #[error("raft: {reason}")]
    Raft {
        /// openraft's message.
        reason: String,
    },
}

/// A node that was leader when it stopped does not resume leadership: its vote is saved
/// again for the same term and the same candidate (itself), but not committed, so it restarts
/// a follower and the cluster elects a leader anew.
///
/// Why: openraft 0.9 restores such a node as leader of the same term at once, and its read
/// index is then the first entry of that term or the committed index it had saved, which may
/// lie before writes it acknowledged before it stopped (the committed index is saved without a
/// sync, and a kill takes the unsynced tail). A read served at once could miss them:
/// `scripts/linearizability.sh` caught a get that read a key as absent right after the
/// leader's restart, although a put of it had been acknowledged before the kill. A leader
/// elected anew first commits an entry of its own term, which covers every acknowledged write.
/// Safety is unchanged: the node still voted for itself in that term, so it votes for nobody
/// else in it.
async fn stand_down_if_leader<LS: RaftLogStorage<TypeConfig>>(log: &mut LS, id: u64) -> Result<(), ServeError> {
    let storage = |e: openraft::StorageError<u64>| ServeError::Raft { reason: e.to_string() };
    let Some(vote) = log.read_vote().await.map_err(storage)? else { return Ok(()) };
    if vote.is_committed() && vote.leader_id().voted_for() == Some(id) {
        log.save_vote(&openraft::Vote::new(vote.leader_id().get_term(), id)).await.map_err(storage)?;
        tracing::info!(term = vote.leader_id().get_term(), "was leader when it stopped: stands for election again");
    }
    Ok(())
}

/// Run one node until shutdown (ctrl-c / SIGTERM) with the given stores.
pub async fn serve<LS, SM>(config: ServeConfig, log: LS, sm: SM, reader: Arc<dyn KvRead>) -> Result<(), ServeError>
where
    LS: RaftLogStorage<TypeConfig>,
    SM: RaftStateMachine<TypeConfig>,
{
    serve_until(config, log, sm, reader, shutdown_signal()).await
}

/// Run one node until `shutdown` completes (tests run nodes in-process this way).
pub async fn serve_until<LS, SM, F>(
    config: ServeConfig,
    mut log: LS,
    sm: SM,
    reader: Arc<dyn KvRead>,
    shutdown: F,
) -> Result<(), ServeError>
where
    LS: RaftLogStorage<TypeConfig>,
    SM: RaftStateMachine<TypeConfig>,
    F: Future<Output = ()> + Send + 'static,
{
    config.validate()?;
    let tls = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => Some(auth::load_tls(cert, key).await?),
        _ => None,
    };
    let isolated = Arc::new(AtomicBool::new(false));
    let transport = network::Transport::new(&config, isolated)?;
    let raft_config = config.raft_config()?;
    stand_down_if_leader(&mut log, config.id).await?;
    let raft = openraft::Raft::new(config.id, raft_config, transport.clone(), log, sm)
        .await
        .map_err(|e| ServeError::Raft { reason: e.to_string() })?;
    let app = Arc::new(api::App::new(&config, raft.clone(), reader, transport));
    if config.init {
        tokio::spawn(api::init_when_peers_answer(app.clone()));
    }
    let router = api::router(app.clone());
    let handle = axum_server::Handle::new();
    let stopper = handle.clone();
    tokio::spawn(async move {
        shutdown.await;
        stopper.graceful_shutdown(Some(std::time::Duration::from_secs(2)));
    });
    let listen = config.listen;
    let served = match tls {
        // TCP_NODELAY on every accepted connection: a reply written while the previous one on
        // the same keep-alive connection is unacknowledged would otherwise wait for the peer's
        // delayed ACK (Nagle), tens of milliseconds on a request path that is otherwise two
        // fsyncs long.
        Some(tls) => {
            let acceptor = axum_server::tls_rustls::RustlsAcceptor::new(tls).acceptor(NoDelayAcceptor::new());
            axum_server::bind(listen).acceptor(acceptor).handle(handle).serve(router.into_make_service()).await
        }
        None => {
            let server = axum_server::bind(listen).acceptor(NoDelayAcceptor::new());
            server.handle(handle).serve(router.into_make_service()).await
        }
    };
    let stopped = raft.shutdown().await;
    served.map_err(|source| ServeError::Io { listen, source })?;
    stopped.map_err(|e| ServeError::Raft { reason: e.to_string() })
}

/// Completes on ctrl-c or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
