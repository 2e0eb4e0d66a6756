//! `GET /metrics`: Prometheus text format, the engine's statistics (the store's
//! `KvRead::metrics_text`) and Raft's: term, leader, log, commit and apply indexes, and on the
//! leader each follower's matched index and lag.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use openraft::{RaftMetrics, ServerState};

use super::api::App;

pub(crate) async fn serve_metrics(State(app): State<Arc<App>>) -> Response {
    let m = app.raft.metrics().borrow().clone();
    let mut text = app.reader.metrics_text();
    raft_text(&mut text, &m);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// One gauge line with its TYPE line.
fn gauge(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
}

fn raft_text(out: &mut String, m: &RaftMetrics<u64, openraft::BasicNode>) {
    let index = |l: Option<u64>| l.map_or(-1, |i| i as i64);
    gauge(out, "raft_node_id", "This node's id.", m.id);
    gauge(out, "raft_term", "The current term.", m.current_term);
    gauge(out, "raft_leader_id", "The leader this node knows of (-1: none).", index(m.current_leader));
    gauge(out, "raft_is_leader", "1 on the leader.", u8::from(m.state == ServerState::Leader));
    gauge(out, "raft_last_log_index", "The last index in the log (-1: empty).", index(m.last_log_index));
    gauge(out, "raft_last_applied_index", "The last applied index.", index(m.last_applied.map(|l| l.index)));
    gauge(out, "raft_snapshot_index", "The last index in the snapshot.", index(m.snapshot.map(|l| l.index)));
    gauge(out, "raft_purged_index", "The last purged index.", index(m.purged.map(|l| l.index)));
    let Some(replication) = &m.replication else {
        return;
    };
    // The commit index is the highest index a majority of voters holds (the leader counts).
    let voters: Vec<u64> = m.membership_config.membership().voter_ids().collect();
    let mut matched: Vec<u64> = voters
        .iter()
        .map(|id| match id {
            id if *id == m.id => m.last_log_index.unwrap_or(0),
            id => replication.get(id).copied().flatten().map_or(0, |l| l.index),
        })
        .collect();
    matched.sort_unstable_by(|a, b| b.cmp(a));
    if let Some(commit) = matched.get(voters.len() / 2) {
        gauge(out, "raft_commit_index", "The highest index a majority holds (leader only).", commit);
    }
    let last = m.last_log_index.unwrap_or(0);
    let _ = writeln!(out, "# HELP raft_follower_matched_index A follower's replicated index (leader only).");
    let _ = writeln!(out, "# TYPE raft_follower_matched_index gauge");
    for (id, l) in replication.iter() {
        let _ = writeln!(out, "raft_follower_matched_index{{follower=\"{id}\"}} {}", index(l.map(|l| l.index)));
    }
    let _ = writeln!(out, "# HELP raft_follower_lag_entries How many entries a follower is behind (leader only).");
    let _ = writeln!(out, "# TYPE raft_follower_lag_entries gauge");
    for (id, l) in replication.iter() {
        let lag = last.saturating_sub(l.map_or(0, |l| l.index));
        let _ = writeln!(out, "raft_follower_lag_entries{{follower=\"{id}\"}} {lag}");
    }
}
