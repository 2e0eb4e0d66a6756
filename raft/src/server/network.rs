//! The Raft RPC client (openraft's `RaftNetworkFactory`/`RaftNetwork` over HTTP/JSON with
//! reqwest) and its fault layer: while the node is isolated every outgoing RPC fails as
//! unreachable without leaving the process (the server side refuses incoming ones).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{ServeConfig, ServeError};
use crate::TypeConfig;

/// Why an RPC did not reach its peer's Raft.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("this node is isolated (fault injection)")]
    Isolated,
    #[error("peer answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
}

/// The HTTP client every connection shares (one connection pool), the scheme and token
/// nodes call each other with, and the isolation switch.
#[derive(Clone)]
pub(crate) struct Transport {
    client: reqwest::Client,
    scheme: &'static str,
    token: Option<Arc<str>>,
    isolated: Arc<AtomicBool>,
}

impl Transport {
    /// A client that trusts the node's own certificate (a cluster shares one, or a CA chain)
    /// when TLS is on, and sends the token when there is one.
    pub(crate) fn new(config: &ServeConfig, isolated: Arc<AtomicBool>) -> Result<Transport, ServeError> {
        let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(2)).tcp_nodelay(true);
        let scheme = match &config.tls_cert {
            Some(path) => {
                let tls = |reason: String| ServeError::Tls { path: path.clone(), reason };
                let pem = std::fs::read(path).map_err(|e| tls(e.to_string()))?;
                for cert in reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| tls(e.to_string()))? {
                    builder = builder.add_root_certificate(cert);
                }
                "https"
            }
            None => "http",
        };
        let client = builder.build().map_err(|e| ServeError::Config { what: format!("HTTP client: {e}") })?;
        Ok(Transport { client, scheme, token: config.token.as_deref().map(Arc::from), isolated })
    }

    pub(crate) fn is_isolated(&self) -> bool {
        self.isolated.load(Ordering::Relaxed)
    }

    pub(crate) fn set_isolated(&self, on: bool) {
        self.isolated.store(on, Ordering::Relaxed);
    }

    /// A request to `path` on the node at `addr`, with the token.
    pub(crate) fn request(&self, method: reqwest::Method, addr: &str, path: &str) -> reqwest::RequestBuilder {
        let rb = self.client.request(method, format!("{}://{addr}{path}", self.scheme));
        match &self.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Transport {
    type Network = Connection;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Connection {
        Connection { t: self.clone(), target, addr: node.addr.clone() }
    }
}

/// The RPC client to one peer.
pub(crate) struct Connection {
    t: Transport,
    target: u64,
    addr: String,
}

type RpcResult<T, E> = Result<T, RPCError<u64, BasicNode, RaftError<u64, E>>>;

impl Connection {
    /// POST `req` to `path` and decode the peer Raft's `Result`; transport failures are
    /// `Unreachable` (openraft backs off) or `Network`, the peer's refusal a `RemoteError`.
    async fn call<Req, Resp, E>(&self, path: &str, req: &Req, ttl: Duration) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        if self.t.is_isolated() {
            return Err(RPCError::Unreachable(Unreachable::new(&Refused::Isolated)));
        }
        let sent = self.t.request(reqwest::Method::POST, &self.addr, path).timeout(ttl).json(req).send().await;
        let resp = sent.map_err(|e| {
            if e.is_connect() {
                RPCError::Unreachable(Unreachable::new(&e))
            } else {
                RPCError::Network(NetworkError::new(&e))
            }
        })?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Err(RPCError::Unreachable(Unreachable::new(&Refused::Status { status: status.as_u16(), body })));
        }
        let res: Result<Resp, RaftError<u64, E>> =
            resp.json().await.map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        res.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        req: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<u64>, openraft::error::Infallible> {
        self.call("/raft/append", &req, option.hard_ttl()).await
    }

    async fn install_snapshot(
        &mut self,
        req: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<u64>, InstallSnapshotError> {
        self.call("/raft/snapshot", &req, option.hard_ttl()).await
    }

    async fn vote(
        &mut self,
        req: VoteRequest<u64>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<u64>, openraft::error::Infallible> {
        self.call("/raft/vote", &req, option.hard_ttl()).await
    }
}
