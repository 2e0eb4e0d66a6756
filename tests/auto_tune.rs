//! Online self-tuning: with `Options::auto_tune` a keyspace moves along the Wacky continuum as
//! its workload shifts, records each move in the manifest (a reopen keeps the policy in force)
//! and says why in `stats`; the data stays exactly the model's through every reshape.

mod common;

use std::sync::Arc;

use common::Model;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::fs::MemFs;
use wisckey::{Db, Options};

fn options(fs: &Arc<MemFs>) -> Options {
    common::tiny_options(fs.clone())
        .gc_interval_ms(0)
        .auto_tune(true)
        .auto_tune_interval_ms(20)
        .write_buffer_bytes(64 << 10)
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

/// Writes only, then lookups of absent keys only: the tuner leaves leveling for a design
/// that writes less, then moves back towards one that probes fewer runs per lookup.
#[test]
fn a_shifting_workload_moves_the_policy_and_the_data_survives_every_reshape() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open("/tune", options(&fs)).expect("open");
    assert_eq!(db.stats().merge_policy, "leveling");
    let mut model = Model::new();
    let mut rng = StdRng::seed_from_u64(3);
    let start = std::time::Instant::now();
    let mut moved_away = None;
    for i in 0..600_000u64 {
        let k = key(rng.gen_range(0..50_000));
        let v = i.to_le_bytes().to_vec();
        db.put(&k, &v).expect("put");
        model.insert(k, v);
        if i % 50_000 == 0 && db.stats().merge_policy != "leveling" {
            moved_away = Some(db.stats());
            break;
        }
    }
    let moved = moved_away.unwrap_or_else(|| panic!("writes alone never moved the policy: {:?}", db.stats().auto_tune));
    assert!(moved.auto_tune.starts_with("moved from leveling to"), "{}", moved.auto_tune);
    let write_policy = moved.merge_policy.clone();
    // Lookups of absent keys: fewer runs per lookup pay now.
    let mut back = None;
    for i in 0..2_000_000u64 {
        assert!(db.get(format!("absent{i}")).expect("get").is_none());
        if i % 50_000 == 0 && db.stats().merge_policy != write_policy {
            back = Some(db.stats());
            break;
        }
    }
    let back = back.unwrap_or_else(|| panic!("absent-key lookups never moved the policy: {}", db.stats().auto_tune));
    eprintln!("{} then {} ({:?})", moved.auto_tune, back.auto_tune, start.elapsed());
    db.wait_for_background_work().expect("settle");
    for (k, v) in model.iter().step_by(97) {
        assert_eq!(db.get(k).expect("get").as_deref(), Some(&v[..]));
    }
    let scanned: Model =
        db.range::<&[u8], _>(..).expect("range").map(|r| r.map(|(k, v)| (k, v.to_vec())).expect("entry")).collect();
    assert!(scanned == model, "the data after two reshapes differs from the model");
    let policy = back.merge_policy.clone();
    let moves = db.stats().auto_tune_moves;
    assert!(moves.len() >= 2 && moves.iter().all(|m| m.starts_with("moved from")), "{moves:?}");
    drop(db);
    let db = Db::open("/tune", options(&fs)).expect("reopen");
    let reopened = db.stats();
    assert_eq!(reopened.merge_policy, policy, "the move is recorded: a reopen keeps it");
    let last = moves.last().expect("a move");
    assert_eq!(reopened.auto_tune, format!("{last} (recorded)"), "the manifest keeps the last move's reason");
}

/// A steady workload settles: at most one move.
#[test]
fn a_steady_workload_makes_at_most_one_move() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open("/steady", options(&fs)).expect("open");
    let mut rng = StdRng::seed_from_u64(5);
    let mut policies = vec![db.stats().merge_policy];
    for i in 0..400_000u64 {
        let k = key(rng.gen_range(0..40_000));
        if i % 2 == 0 {
            db.put(&k, b"value").expect("put");
        } else {
            db.get(&k).expect("get");
        }
        if i % 20_000 == 0 {
            let p = db.stats().merge_policy;
            if policies.last() != Some(&p) {
                policies.push(p);
            }
        }
    }
    assert!(policies.len() <= 2, "a steady mix moved more than once: {policies:?}");
}
