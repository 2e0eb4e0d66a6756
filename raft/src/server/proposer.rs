//! Group commit of client writes: concurrent puts, deletes and batches become one Raft entry.
//!
//! openraft 0.9 appends each `client_write` as an entry of its own, and the leader's `RaftCore`
//! waits for that append's flush before it takes the next request: one fsync per write, one
//! after another, on the leader. With many clients that serial chain of fsyncs, not the disk's
//! bandwidth nor the network, sets the throughput. Here writes queue while the leader appends
//! the previous entry; once that append is done, everything queued meanwhile (up to a size
//! bound) is proposed as one `Request::Batch` entry, whose one append is one fsync on each node
//! (etcd and TiKV batch proposals the same way, behind their leader's log write). A lone write
//! is proposed as it is, at once: the queue never waits for company, so an idle cluster
//! answers as fast as before. At most `max_inflight` entries are proposed and not yet applied.
//!
//! Each write in a group answers with the group's log index. The group is applied atomically
//! and in queue order, inside every member's request interval, so linearizability holds; a
//! client's own batch is spliced in whole (a `Batch` holds only `Set`s and `Delete`s), so it
//! stays all-or-nothing.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use openraft::error::{ClientWriteError, Fatal, RaftError};
use openraft::{BasicNode, Raft};
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::{Request, TypeConfig};

/// What a write answers: the index of the entry that carried it, or why it failed.
pub(crate) type WriteResult = Result<u64, RaftError<u64, ClientWriteError<u64, BasicNode>>>;

/// The most bytes of keys and values one group entry carries (a single larger write still
/// goes alone): a follower receives and parses each entry in one piece.
const MAX_GROUP_BYTES: usize = 4 << 20;
/// The most writes one group entry carries.
const MAX_GROUP_WRITES: usize = 1024;

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// How entries reach Raft: `submit` completes once the leader has appended the entry (its
/// next append may begin) and yields the future of the entry's application.
trait Submit: Send + 'static {
    fn submit(&self, request: Request) -> Boxed<Boxed<WriteResult>>;
}

impl Submit for Raft<TypeConfig> {
    // The outer future is the leader's append, the one it yields the entry's application.
    #[allow(clippy::async_yields_async)]
    fn submit(&self, request: Request) -> Boxed<Boxed<WriteResult>> {
        let raft = self.clone();
        Box::pin(async move {
            let applied = match raft.client_write_ff(request).await {
                Ok(applied) => applied,
                Err(fatal) => return Box::pin(std::future::ready(Err(RaftError::Fatal(fatal)))) as Boxed<_>,
            };
            // A barrier through RaftCore's queue: it takes messages in order and runs a
            // write's append (and waits for its flush) before it takes the next one, so this
            // answers once the entry is appended. Were the append ever to run apart from
            // RaftCore, it would answer sooner: smaller groups, never a wrong answer.
            let _ = raft.with_raft_state(|_| ()).await;
            Box::pin(async move {
                match applied.await {
                    Ok(Ok(resp)) => Ok(resp.log_id.index),
                    Ok(Err(e)) => Err(RaftError::APIError(e)),
                    Err(_) => Err(RaftError::Fatal(Fatal::Stopped)),
                }
            }) as Boxed<_>
        })
    }
}

/// A queued write and where its answer goes.
struct Pending {
    request: Request,
    bytes: usize,
    reply: oneshot::Sender<WriteResult>,
}

/// The handle handlers propose writes through (cheap to clone).
#[derive(Clone)]
pub(crate) struct Proposer {
    tx: mpsc::UnboundedSender<Pending>,
}

impl Proposer {
    /// Start the grouping task over `raft`, with at most `max_inflight` (at least 1) group
    /// entries proposed and not yet applied at any time.
    pub(crate) fn spawn(raft: Raft<TypeConfig>, max_inflight: usize) -> Proposer {
        Proposer::spawn_with(raft, max_inflight)
    }

    fn spawn_with(submit: impl Submit, max_inflight: usize) -> Proposer {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(submit, rx, Arc::new(Semaphore::new(max_inflight.max(1)))));
        Proposer { tx }
    }

    /// Propose `request` (a `Set`, a `Delete` or a `Batch` of them) and wait until the entry
    /// carrying it is applied here.
    pub(crate) async fn write(&self, request: Request) -> WriteResult {
        let (reply, answer) = oneshot::channel();
        let bytes = request_bytes(&request);
        let stopped = || RaftError::Fatal(Fatal::Stopped);
        self.tx.send(Pending { request, bytes, reply }).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// The bytes of keys and values in `request`.
fn request_bytes(request: &Request) -> usize {
    match request {
        Request::Set { key, value } => key.len() + value.len(),
        Request::Delete { key } => key.len(),
        Request::Batch(ops) => ops.iter().map(request_bytes).sum(),
    }
}

/// The grouping loop: take a slot, wait for a write, add whatever else is queued (within the
/// bounds), propose it and wait for the leader's append; the slot comes back once the entry
/// is applied.
async fn run(submit: impl Submit, mut rx: mpsc::UnboundedReceiver<Pending>, slots: Arc<Semaphore>) {
    let mut carried: Option<Pending> = None;
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let first = match carried.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let mut bytes = first.bytes;
        let mut group = vec![first];
        while group.len() < MAX_GROUP_WRITES {
            let Ok(next) = rx.try_recv() else { break };
            if bytes + next.bytes > MAX_GROUP_BYTES {
                carried = Some(next);
                break;
            }
            bytes += next.bytes;
            group.push(next);
        }
        let (request, replies) = merge(group);
        let applied = submit.submit(request).await;
        tokio::spawn(async move {
            let result = applied.await;
            drop(slot);
            for reply in replies {
                // A handler that timed out has gone; nobody is left to tell.
                let _ = reply.send(result.clone());
            }
        });
    }
}

/// One request for the whole group (a lone write unchanged) and the answers' channels.
fn merge(group: Vec<Pending>) -> (Request, Vec<oneshot::Sender<WriteResult>>) {
    if group.len() == 1 {
        let p = group.into_iter().next().expect("a group has a first write");
        return (p.request, vec![p.reply]);
    }
    let mut ops = Vec::with_capacity(group.len());
    let mut replies = Vec::with_capacity(group.len());
    for p in group {
        match p.request {
            Request::Batch(inner) => ops.extend(inner),
            single => ops.push(single),
        }
        replies.push(p.reply);
    }
    (Request::Batch(ops), replies)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(request: Request) -> (Pending, oneshot::Receiver<WriteResult>) {
        let (reply, rx) = oneshot::channel();
        (Pending { bytes: request_bytes(&request), request, reply }, rx)
    }

    fn set(k: &str, v: &str) -> Request {
        Request::Set { key: k.into(), value: v.into() }
    }

    /// An entry the fake Raft was handed, and the switches that say it is appended and applied.
    struct Submitted {
        request: Request,
        appended: oneshot::Sender<()>,
        applied: oneshot::Sender<WriteResult>,
    }

    struct FakeRaft(mpsc::UnboundedSender<Submitted>);

    impl Submit for FakeRaft {
        #[allow(clippy::async_yields_async)]
        fn submit(&self, request: Request) -> Boxed<Boxed<WriteResult>> {
            let (appended, on_append) = oneshot::channel();
            let (applied, on_apply) = oneshot::channel();
            let _ = self.0.send(Submitted { request, appended, applied });
            Box::pin(async move {
                let _ = on_append.await;
                Box::pin(async move { on_apply.await.unwrap_or(Err(RaftError::Fatal(Fatal::Stopped))) }) as Boxed<_>
            })
        }
    }

    /// A proposer over a fake Raft whose appends and applies the test completes by hand.
    fn proposer_under_test(max_inflight: usize) -> (Proposer, mpsc::UnboundedReceiver<Submitted>) {
        let (seen, submitted) = mpsc::unbounded_channel();
        (Proposer::spawn_with(FakeRaft(seen), max_inflight), submitted)
    }

    /// Queue `request` at once (in call order, unlike spawned `write`s).
    fn queue(p: &Proposer, request: Request) -> oneshot::Receiver<WriteResult> {
        let (pending, answer) = pending(request);
        assert!(p.tx.send(pending).is_ok(), "the proposer runs");
        answer
    }

    #[tokio::test]
    async fn writes_queued_during_an_append_go_together_next_and_share_the_answer() {
        let (p, mut submitted) = proposer_under_test(8);
        let first = queue(&p, set("a", "0"));
        let e1 = submitted.recv().await.expect("the first write is proposed at once");
        assert_eq!(e1.request, set("a", "0"));
        // The leader is appending it: these wait, then go as one entry in queue order, as
        // soon as that append is done (before it is applied).
        let rest: Vec<_> = (1..4).map(|i| queue(&p, set(&format!("k{i}"), "v"))).collect();
        tokio::task::yield_now().await;
        assert!(submitted.try_recv().is_err(), "proposed during the previous append");
        assert!(e1.appended.send(()).is_ok());
        let e2 = submitted.recv().await.expect("the group is proposed");
        assert_eq!(e2.request, Request::Batch((1..4).map(|i| set(&format!("k{i}"), "v")).collect()));
        let refused = RaftError::APIError(ClientWriteError::ForwardToLeader(openraft::error::ForwardToLeader {
            leader_id: Some(2),
            leader_node: None,
        }));
        assert!(e2.appended.send(()).is_ok());
        assert!(e2.applied.send(Err(refused.clone())).is_ok());
        for answer in rest {
            assert_eq!(answer.await.expect("answered"), Err(refused.clone()));
        }
        assert!(e1.applied.send(Ok(7)).is_ok());
        assert_eq!(first.await.expect("answered"), Ok(7));
    }

    #[tokio::test]
    async fn no_more_than_max_inflight_entries_wait_to_be_applied() {
        let (p, mut submitted) = proposer_under_test(1);
        let first = queue(&p, set("a", "0"));
        let e1 = submitted.recv().await.expect("proposed");
        assert!(e1.appended.send(()).is_ok());
        let second = queue(&p, set("b", "1"));
        tokio::task::yield_now().await;
        assert!(submitted.try_recv().is_err(), "a second entry while the first is unapplied");
        assert!(e1.applied.send(Ok(1)).is_ok());
        assert_eq!(first.await.expect("answered"), Ok(1));
        let e2 = submitted.recv().await.expect("proposed once the first is applied");
        assert_eq!(e2.request, set("b", "1"));
        assert!(e2.appended.send(()).is_ok());
        assert!(e2.applied.send(Ok(2)).is_ok());
        assert_eq!(second.await.expect("answered"), Ok(2));
    }

    #[tokio::test]
    async fn a_group_stops_at_its_byte_bound_and_the_next_write_leads_the_next_group() {
        let (p, mut submitted) = proposer_under_test(8);
        let big = "x".repeat(MAX_GROUP_BYTES / 2);
        let first = queue(&p, set("a", "0"));
        let e = submitted.recv().await.expect("proposed");
        let answers: Vec<_> = ["b", "c", "d"].iter().map(|k| queue(&p, set(k, &big))).collect();
        assert!(e.appended.send(()).is_ok());
        assert!(e.applied.send(Ok(1)).is_ok());
        assert_eq!(first.await.expect("answered"), Ok(1));
        // b and c together are just over the bound (keys count too): each goes alone.
        for (index, (answer, key)) in (2..).zip(answers.into_iter().zip(["b", "c", "d"])) {
            let e = submitted.recv().await.expect("proposed");
            assert_eq!(e.request, set(key, &big));
            assert!(e.appended.send(()).is_ok());
            assert!(e.applied.send(Ok(index)).is_ok());
            assert_eq!(answer.await.expect("answered"), Ok(index));
        }
    }

    #[test]
    fn a_lone_write_is_proposed_unchanged() {
        let (p, _rx) = pending(set("a", "1"));
        let (request, replies) = merge(vec![p]);
        assert_eq!(request, set("a", "1"));
        assert_eq!(replies.len(), 1);
    }

    #[test]
    fn a_group_is_one_flat_batch_in_queue_order_with_client_batches_spliced_whole() {
        let del = Request::Delete { key: "b".into() };
        let (p1, _r1) = pending(set("a", "1"));
        let (p2, _r2) = pending(Request::Batch(vec![set("b", "2"), del.clone()]));
        let (p3, _r3) = pending(set("a", "3"));
        let (request, replies) = merge(vec![p1, p2, p3]);
        assert_eq!(request, Request::Batch(vec![set("a", "1"), set("b", "2"), del, set("a", "3")]));
        assert_eq!(replies.len(), 3);
    }
}
