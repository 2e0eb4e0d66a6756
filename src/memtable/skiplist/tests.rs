use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;

use proptest::prelude::*;

use super::*;

/// An internal key as the list orders it: user key ascending, trailer descending.
type Model = BTreeSet<(Vec<u8>, std::cmp::Reverse<u64>)>;

fn ikey(user_key: &[u8], trailer: u64) -> Vec<u8> {
    let mut k = user_key.to_vec();
    k.extend_from_slice(&trailer.to_le_bytes());
    k
}

fn parts(e: &Entry<'_, u32>) -> (Vec<u8>, u64) {
    let (u, t) = split_ikey(e.key());
    (u.to_vec(), t)
}

proptest! {
    #[test]
    fn the_list_orders_and_finds_like_a_sorted_set(
        entries in proptest::collection::vec((proptest::collection::vec(0u8..4, 0..4), 0u64..1000), 0..300),
        probes in proptest::collection::vec((proptest::collection::vec(0u8..4, 0..4), 0u64..1000), 0..50),
    ) {
        let list = SkipList::<u32>::default();
        let mut model = Model::new();
        for (i, (k, t)) in entries.iter().enumerate() {
            if model.insert((k.clone(), std::cmp::Reverse(*t))) {
                list.insert(k, *t, &(i as u32).to_le_bytes(), Some(i as u32));
            }
        }
        prop_assert_eq!(list.len(), model.len());
        let listed: Vec<(Vec<u8>, u64)> = list.iter().map(|e| parts(&e)).collect();
        let expected: Vec<(Vec<u8>, u64)> = model.iter().map(|(k, t)| (k.clone(), t.0)).collect();
        prop_assert_eq!(&listed, &expected);
        for e in list.iter() {
            prop_assert_eq!(e.value(), &e.kept().unwrap().to_le_bytes()[..], "value and payload of one insert");
        }
        // Backwards, one `prev` at a time from the last entry.
        let mut back = Vec::new();
        let mut at = list.last();
        while let Some(e) = at {
            back.push(parts(&e));
            at = e.prev();
        }
        back.reverse();
        prop_assert_eq!(&back, &expected);
        for (k, t) in probes {
            let want = model.range((k.clone(), std::cmp::Reverse(t))..).next().map(|(k, t)| (k.clone(), t.0));
            prop_assert_eq!(list.lower_bound(&ikey(&k, t)).map(|e| parts(&e)), want);
        }
    }
}

#[test]
fn readers_see_a_sorted_list_while_the_writer_inserts() {
    let list = Arc::new(SkipList::<u32>::default());
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (list, done) = (list.clone(), done.clone());
            std::thread::spawn(move || {
                let mut passes = 0;
                while !done.load(Atomic::Acquire) || passes == 0 {
                    let seen = list.len();
                    let keys: Vec<Vec<u8>> = list.iter().map(|e| e.key().to_vec()).collect();
                    assert!(keys.len() >= seen, "an entry counted before the walk is missing");
                    assert!(keys.windows(2).all(|w| w[0] < w[1]), "out of order");
                    // Backwards from the last entry, a few hundred steps.
                    let mut at = list.last();
                    let mut back = Vec::new();
                    while let Some(e) = at.filter(|_| back.len() < 300) {
                        back.push(e.key().to_vec());
                        at = e.prev();
                    }
                    assert!(back.windows(2).all(|w| w[0] > w[1]), "prev out of order");
                    passes += 1;
                }
                passes
            })
        })
        .collect();
    for i in 0..20_000u32 {
        // Scrambled order, every key unique; big-endian so byte order is numeric order.
        let k = (i.wrapping_mul(2_654_435_761)).to_be_bytes();
        list.insert(&k, 0, b"v", None);
        if i % 1000 == 0 {
            let found = list.lower_bound(&ikey(&k, u64::MAX)).expect("just inserted");
            assert_eq!(split_ikey(found.key()).0, &k[..]);
        }
    }
    done.store(true, Atomic::Release);
    for r in readers {
        assert!(r.join().expect("reader panicked") > 0);
    }
    assert_eq!(list.iter().count(), 20_000);
}

#[test]
fn dropping_the_list_drops_every_payload_once() {
    let token = Arc::new(());
    {
        let list = SkipList::<Arc<()>>::default();
        for i in 0..1000u32 {
            let kept = (i % 3 == 0).then(|| token.clone());
            list.insert(&i.to_be_bytes(), 0, b"", kept);
        }
        assert_eq!(Arc::strong_count(&token), 1 + 334);
    }
    assert_eq!(Arc::strong_count(&token), 1);
}

#[test]
fn a_node_larger_than_a_quarter_chunk_gets_its_own_and_the_rest_keep_bumping() {
    let list = SkipList::<u32>::default();
    let big = vec![7u8; CHUNK_BYTES];
    list.insert(b"b", 1, &big, None);
    list.insert(b"a", 1, b"small", None);
    list.insert(b"c", 1, b"small too", None);
    let got: Vec<(Vec<u8>, usize)> = list.iter().map(|e| (parts(&e).0, e.value().len())).collect();
    assert_eq!(got, vec![(b"a".to_vec(), 5), (b"b".to_vec(), CHUNK_BYTES), (b"c".to_vec(), 9)]);
    assert!(list.lower_bound(&ikey(b"b", 9)).is_some_and(|e| e.value() == &big[..]));
}

#[test]
fn chunks_of_a_dropped_list_are_reused() {
    let stash = Arc::new(ChunkStash::new(4));
    let first = {
        let list = SkipList::<u32>::new(Some(stash.clone()), Default::default());
        list.insert(b"k", 1, b"v", None);
        list.first().map(|e| e.key().as_ptr() as usize)
    };
    assert_eq!(stash.chunks.lock().len(), 1, "the chunk went back");
    let list = SkipList::<u32>::new(Some(stash.clone()), Default::default());
    list.insert(b"k", 1, b"v", None);
    assert_eq!(list.first().map(|e| e.key().as_ptr() as usize), first, "same memory, same place");
}

/// Regression: `lower_bound` found the last node before the target, then read that node's
/// link again; a node inserted into the gap in between (sorting before the target) came back
/// as the answer. A memtable `get` then saw another key there and answered "absent", missing
/// the key's newest entry — value-log GC took an older copy for live and put it back.
#[test]
fn lower_bound_never_answers_a_node_before_the_target_while_inserts_land_right_before_it() {
    let list = Arc::new(SkipList::<u32>::default());
    list.insert(b"m", 1, b"target", None);
    list.insert(b"a", 1, b"low", None);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (list, stop) = (list.clone(), stop.clone());
        std::thread::spawn(move || {
            // Keys between "a" and "m", each new one landing right before "m".
            for i in 0..200_000u32 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let mut k = b"l".to_vec();
                k.extend_from_slice(&i.to_be_bytes());
                list.insert(&k, 1, b"gap", None);
            }
        })
    };
    let mut wrong = 0u64;
    for _ in 0..2_000_000u32 {
        match list.lower_bound(&ikey(b"m", u64::MAX)) {
            Some(e) if split_ikey(e.key()).0 == b"m" => {}
            _ => wrong += 1,
        }
        if writer.is_finished() {
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().expect("writer");
    assert_eq!(wrong, 0, "lower_bound answered a node before the target {wrong} times");
}
