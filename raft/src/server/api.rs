//! The HTTP handlers: the client API (`/kv/*`), the management API (`/cluster/*`), the Raft
//! RPCs nodes send each other (`/raft/*`), the fault switch (`/debug/isolate`), and the
//! errors they answer (`{"error": ...}` with a 4xx/5xx status; 421 names the leader).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Request as HttpRequest, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use openraft::error::{CheckIsLeaderError, ClientWriteError, ForwardToLeader, InitializeError, RaftError};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{BasicNode, Raft};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::json;

use super::network::Transport;
use super::proposer::{Proposer, WriteResult};
use super::{auth, metrics, KvRead, ServeConfig};
use crate::{Request, TypeConfig};

/// The largest Raft RPC body (entries are batched by openraft; snapshots come in chunks).
const RAFT_BODY_LIMIT: usize = 512 << 20;
/// The most pairs one scan answers.
const MAX_SCAN_LIMIT: usize = 10_000;

/// What every handler shares.
pub(crate) struct App {
    pub(crate) id: u64,
    pub(crate) raft: Raft<TypeConfig>,
    pub(crate) reader: Arc<dyn KvRead>,
    pub(crate) token: Option<String>,
    pub(crate) transport: Transport,
    proposer: Proposer,
    peers: BTreeMap<u64, String>,
    fault_injection: bool,
    request_timeout: Duration,
    max_body_bytes: usize,
}

impl App {
    pub(crate) fn new(
        config: &ServeConfig,
        raft: Raft<TypeConfig>,
        reader: Arc<dyn KvRead>,
        transport: Transport,
    ) -> App {
        App {
            id: config.id,
            proposer: Proposer::spawn(raft.clone(), config.max_inflight_groups),
            raft,
            reader,
            token: config.token.clone(),
            transport,
            peers: config.peers.clone(),
            fault_injection: config.allow_fault_injection,
            request_timeout: Duration::from_millis(config.request_timeout_ms),
            max_body_bytes: config.max_body_bytes,
        }
    }
}

/// Every route, behind the token check.
pub(crate) fn router(app: Arc<App>) -> Router {
    let client = Router::new()
        .route("/kv/put", post(put))
        .route("/kv/delete", post(delete))
        .route("/kv/batch", post(batch))
        .route("/kv/get", post(read))
        .route("/kv/scan", post(scan))
        .route("/cluster/init", post(init))
        .route("/cluster/add-learner", post(add_learner))
        .route("/cluster/change-membership", post(change_membership))
        .route("/cluster/status", get(status))
        .route("/metrics", get(metrics::serve_metrics))
        .layer(DefaultBodyLimit::max(app.max_body_bytes));
    let mut raft = Router::new()
        .route("/raft/append", post(raft_append))
        .route("/raft/vote", post(raft_vote))
        .route("/raft/snapshot", post(raft_snapshot))
        .layer(DefaultBodyLimit::max(RAFT_BODY_LIMIT));
    if app.fault_injection {
        raft = raft.route("/debug/isolate", post(isolate));
    }
    client
        .merge(raft)
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such endpoint") })
        .layer(axum::middleware::from_fn_with_state(app.clone(), auth::require_token))
        .with_state(app)
}

/// An error answer: `status` with `{"error": message}`.
pub(crate) fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (status, Json(json!({ "error": message.to_string() }))).into_response()
}

/// A JSON body: too large is 413, not JSON or not the expected shape is 400 (no content
/// type is required).
pub(crate) struct JsonBody<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = Response;

    async fn from_request(req: HttpRequest, state: &S) -> Result<Self, Response> {
        let bytes = Bytes::from_request(req, state).await.map_err(|r| error(r.status(), r.body_text()))?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| error(StatusCode::BAD_REQUEST, format!("bad JSON body: {e}")))
    }
}

type AppState = State<Arc<App>>;

#[derive(Deserialize)]
struct PutBody {
    key: String,
    value: String,
}

#[derive(Deserialize)]
struct KeyBody {
    key: String,
    #[serde(default)]
    stale: bool,
}

#[derive(Deserialize)]
struct BatchBody {
    ops: Vec<BatchOp>,
}

#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum BatchOp {
    Put { key: String, value: String },
    Delete { key: String },
}

#[derive(Deserialize)]
struct ScanBody {
    #[serde(default)]
    start: String,
    end: Option<String>,
    limit: Option<usize>,
    #[serde(default)]
    stale: bool,
}

/// Refuse keys the engine would refuse when the entry is applied (a failed apply stops Raft).
fn check_key(key: &str) -> Result<(), Response> {
    if key.is_empty() {
        return Err(error(StatusCode::BAD_REQUEST, "the key is empty"));
    }
    if key.len() > wisckey::MAX_KEY_BYTES {
        let n = key.len();
        return Err(error(StatusCode::BAD_REQUEST, format!("the key has {n} bytes, over {}", wisckey::MAX_KEY_BYTES)));
    }
    Ok(())
}

async fn put(State(app): AppState, JsonBody(b): JsonBody<PutBody>) -> Response {
    if let Err(r) = check_key(&b.key) {
        return r;
    }
    write(&app, Request::Set { key: b.key, value: b.value }).await
}

async fn delete(State(app): AppState, JsonBody(b): JsonBody<KeyBody>) -> Response {
    if let Err(r) = check_key(&b.key) {
        return r;
    }
    write(&app, Request::Delete { key: b.key }).await
}

async fn batch(State(app): AppState, JsonBody(b): JsonBody<BatchBody>) -> Response {
    if b.ops.is_empty() {
        return error(StatusCode::BAD_REQUEST, "the batch has no ops");
    }
    let mut requests = Vec::with_capacity(b.ops.len());
    for op in b.ops {
        let (BatchOp::Put { key, .. } | BatchOp::Delete { key }) = &op;
        if let Err(r) = check_key(key) {
            return r;
        }
        requests.push(match op {
            BatchOp::Put { key, value } => Request::Set { key, value },
            BatchOp::Delete { key } => Request::Delete { key },
        });
    }
    write(&app, Request::Batch(requests)).await
}

/// Run `f` for at most the request timeout; past it the outcome is unknown (503).
async fn bounded<T>(app: &App, f: impl Future<Output = T>) -> Result<T, Response> {
    tokio::time::timeout(app.request_timeout, f).await.map_err(|_| {
        error(StatusCode::SERVICE_UNAVAILABLE, "timed out waiting for the cluster (the outcome is unknown)")
    })
}

/// Propose `req` (grouped with concurrent writes into one entry) and answer the entry's log
/// index once applied here.
async fn write(app: &App, req: Request) -> Response {
    let written: Result<WriteResult, Response> = bounded(app, app.proposer.write(req)).await;
    match written {
        Err(r) => r,
        Ok(Ok(index)) => Json(json!({ "index": index })).into_response(),
        Ok(Err(e)) => write_error(e),
    }
}

fn write_error(e: RaftError<u64, ClientWriteError<u64, BasicNode>>) -> Response {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => not_leader(&f),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => error(StatusCode::BAD_REQUEST, c),
        RaftError::Fatal(f) => error(StatusCode::SERVICE_UNAVAILABLE, f),
    }
}

/// 421 with where the leader is (both null while an election is on).
fn not_leader(f: &ForwardToLeader<u64, BasicNode>) -> Response {
    let body = json!({
        "error": "this node is not the leader",
        "leader_id": f.leader_id,
        "leader_addr": f.leader_node.as_ref().map(|n| n.addr.clone()),
    });
    (StatusCode::MISDIRECTED_REQUEST, Json(body)).into_response()
}

/// Wait until this node's state reflects every write committed before now (openraft's read
/// index: the leader confirms it still leads, then waits for the apply), unless `stale`.
async fn linearize(app: &App, stale: bool) -> Result<(), Response> {
    if stale {
        return Ok(());
    }
    match bounded(app, app.raft.ensure_linearizable()).await? {
        Ok(_) => Ok(()),
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => Err(not_leader(&f)),
        Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(q))) => {
            Err(error(StatusCode::SERVICE_UNAVAILABLE, q))
        }
        Err(RaftError::Fatal(f)) => Err(error(StatusCode::SERVICE_UNAVAILABLE, f)),
    }
}

async fn read(State(app): AppState, JsonBody(b): JsonBody<KeyBody>) -> Response {
    if let Err(r) = linearize(&app, b.stale).await {
        return r;
    }
    match app.reader.get(&b.key) {
        Ok(value) => Json(json!({ "value": value })).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("read failed: {e}")),
    }
}

async fn scan(State(app): AppState, JsonBody(b): JsonBody<ScanBody>) -> Response {
    let limit = b.limit.unwrap_or(MAX_SCAN_LIMIT);
    if limit > MAX_SCAN_LIMIT {
        return error(StatusCode::BAD_REQUEST, format!("limit {limit} is over {MAX_SCAN_LIMIT}"));
    }
    if let Err(r) = linearize(&app, b.stale).await {
        return r;
    }
    let reader = app.reader.clone();
    let scanned = tokio::task::spawn_blocking(move || reader.scan(&b.start, b.end.as_deref(), limit)).await;
    match scanned {
        Ok(Ok(items)) => Json(json!({ "items": items })).into_response(),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("scan failed: {e}")),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("scan failed: {e}")),
    }
}

#[derive(Deserialize)]
struct InitBody {
    members: BTreeMap<u64, String>,
}

async fn init(State(app): AppState, JsonBody(b): JsonBody<InitBody>) -> Response {
    initialize(&app, b.members).await
}

async fn initialize(app: &App, members: BTreeMap<u64, String>) -> Response {
    if members.is_empty() {
        return error(StatusCode::BAD_REQUEST, "no members");
    }
    let nodes: BTreeMap<u64, BasicNode> = members.into_iter().map(|(id, addr)| (id, BasicNode::new(addr))).collect();
    match app.raft.initialize(nodes).await {
        Ok(()) => Json(json!({ "initialized": true })).into_response(),
        Err(RaftError::APIError(InitializeError::NotAllowed(e))) => error(StatusCode::CONFLICT, e),
        Err(RaftError::APIError(InitializeError::NotInMembers(e))) => error(StatusCode::BAD_REQUEST, e),
        Err(RaftError::Fatal(f)) => error(StatusCode::SERVICE_UNAVAILABLE, f),
    }
}

#[derive(Deserialize)]
struct LearnerBody {
    node_id: u64,
    addr: String,
}

async fn add_learner(State(app): AppState, JsonBody(b): JsonBody<LearnerBody>) -> Response {
    let added = bounded(&app, app.raft.add_learner(b.node_id, BasicNode::new(b.addr), true)).await;
    match added {
        Err(r) => r,
        Ok(Ok(resp)) => Json(json!({ "index": resp.log_id.index })).into_response(),
        Ok(Err(e)) => write_error(e),
    }
}

#[derive(Deserialize)]
struct MembershipBody {
    members: BTreeSet<u64>,
}

async fn change_membership(State(app): AppState, JsonBody(b): JsonBody<MembershipBody>) -> Response {
    if b.members.is_empty() {
        return error(StatusCode::BAD_REQUEST, "no members");
    }
    match bounded(&app, app.raft.change_membership(b.members, false)).await {
        Err(r) => r,
        Ok(Ok(resp)) => Json(json!({ "index": resp.log_id.index })).into_response(),
        Ok(Err(e)) => write_error(e),
    }
}

/// This node's view: id, role, term, leader, log and apply indexes, membership.
async fn status(State(app): AppState) -> Response {
    let m = app.raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    let voters: Vec<u64> = membership.voter_ids().collect();
    let nodes: BTreeMap<u64, String> = membership.nodes().map(|(id, n)| (*id, n.addr.clone())).collect();
    Json(json!({
        "id": app.id,
        "state": format!("{:?}", m.state),
        "term": m.current_term,
        "leader": m.current_leader,
        "last_log_index": m.last_log_index,
        "last_applied": m.last_applied.map(|l| l.index),
        "snapshot": m.snapshot.map(|l| l.index),
        "membership": { "voters": voters, "nodes": nodes },
        "isolated": app.transport.is_isolated(),
        "error": m.running_state.as_ref().err().map(ToString::to_string),
    }))
    .into_response()
}

/// 503 for Raft RPCs while the node is isolated.
fn refuse_if_isolated(app: &App) -> Option<Response> {
    app.transport.is_isolated().then(|| error(StatusCode::SERVICE_UNAVAILABLE, "isolated (fault injection)"))
}

async fn raft_append(State(app): AppState, JsonBody(req): JsonBody<AppendEntriesRequest<TypeConfig>>) -> Response {
    if let Some(r) = refuse_if_isolated(&app) {
        return r;
    }
    Json(app.raft.append_entries(req).await).into_response()
}

async fn raft_vote(State(app): AppState, JsonBody(req): JsonBody<VoteRequest<u64>>) -> Response {
    if let Some(r) = refuse_if_isolated(&app) {
        return r;
    }
    Json(app.raft.vote(req).await).into_response()
}

async fn raft_snapshot(State(app): AppState, JsonBody(req): JsonBody<InstallSnapshotRequest<TypeConfig>>) -> Response {
    if let Some(r) = refuse_if_isolated(&app) {
        return r;
    }
    match app.raft.install_snapshot(req).await {
        // The stream this chunk ended did not check out: openraft calls it a storage error,
        // but nothing was installed and Raft runs on here. 422 tells the leader (as a refusal
        // it backs off from) to send the snapshot again.
        Err(RaftError::Fatal(f)) if f.to_string().contains(crate::snapshot_file::UNVERIFIED) => {
            tracing::warn!(node = app.id, error = %f, "a received snapshot did not verify; refused, nothing installed");
            error(StatusCode::UNPROCESSABLE_ENTITY, f)
        }
        r => Json(r).into_response(),
    }
}

#[derive(Deserialize)]
struct IsolateBody {
    isolated: bool,
}

async fn isolate(State(app): AppState, JsonBody(b): JsonBody<IsolateBody>) -> Response {
    app.transport.set_isolated(b.isolated);
    tracing::warn!(node = app.id, isolated = b.isolated, "fault injection: isolation switched");
    Json(json!({ "isolated": b.isolated })).into_response()
}

/// `--init`: once every peer answers, initialize the cluster with all of them as voters.
/// Nothing is done when this node or any peer already belongs to a cluster.
pub(crate) async fn init_when_peers_answer(app: Arc<App>) {
    let mut delay = Duration::from_millis(100);
    loop {
        match app.raft.is_initialized().await {
            Ok(true) | Err(_) => return,
            Ok(false) => {}
        }
        match peers_state(&app).await {
            Some(false) => {
                let r = initialize(&app, app.peers.clone()).await;
                if r.status().is_success() || r.status() == StatusCode::CONFLICT {
                    tracing::info!(node = app.id, "cluster initialized");
                    return;
                }
                tracing::warn!(node = app.id, status = %r.status(), "cluster init failed; retrying");
            }
            Some(true) => {
                tracing::info!(node = app.id, "a peer already belongs to a cluster: not initializing");
                return;
            }
            None => {}
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

/// Whether any peer already has a membership (`None` until every peer answers).
async fn peers_state(app: &App) -> Option<bool> {
    let mut any_member = false;
    for (id, addr) in &app.peers {
        if *id == app.id {
            continue;
        }
        let sent = app.transport.request(reqwest::Method::GET, addr, "/cluster/status").timeout(Duration::from_secs(2));
        let answered = async { sent.send().await?.error_for_status()?.json::<serde_json::Value>().await };
        let body = match answered.await {
            Ok(body) => body,
            Err(e) => {
                tracing::info!(node = app.id, peer = id, error = %e, "waiting for a peer to answer before init");
                return None;
            }
        };
        let voters = body.pointer("/membership/voters").and_then(|v| v.as_array()).map_or(0, Vec::len);
        any_member |= voters > 0;
    }
    Some(any_member)
}
