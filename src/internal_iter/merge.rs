//! Merges several sorted internal iterators into one sorted stream (LevelDB's MergingIterator).
//! Children are few (memtables + L0 files + one per sorted run), so a linear scan for the
//! smallest/largest child is as fast as a heap and simpler. The scan also notes the runner-up:
//! a step that leaves the current child still ahead of it (long stretches of a scan come from
//! one run) costs one key comparison instead of one per child.

use std::cmp::Ordering;

use super::InternalIterator;
use crate::comparator::KeyOrder;
use crate::error::Result;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Reverse,
}

/// A merge of child iterators; equal keys from several children come out in child order.
/// Children of one kind merge unboxed (a DTable's segments); of mixed kinds, boxed.
pub struct MergingIterator<I: InternalIterator = Box<dyn InternalIterator>> {
    children: Vec<I>,
    /// The order of the children's keys.
    order: KeyOrder,
    current: Option<usize>,
    /// The child that would come next if the current one moved past it (the best of the
    /// others in the direction of travel); `None` when no other child is valid.
    runner_up: Option<usize>,
    direction: Direction,
}

impl<I: InternalIterator> MergingIterator<I> {
    pub fn new(children: Vec<I>, order: KeyOrder) -> Self {
        MergingIterator { children, order, current: None, runner_up: None, direction: Direction::Forward }
    }

    /// `seek`, with each child positioned by `f(i, child)` instead of its own `seek` (for an
    /// owner that knows where each child lands): `f` must leave child `i` at its first entry
    /// >= the target, or invalid.
    pub fn seek_each(&mut self, mut f: impl FnMut(usize, &mut I) -> Result<()>) -> Result<()> {
        for (i, c) in self.children.iter_mut().enumerate() {
            f(i, c)?;
        }
        self.direction = Direction::Forward;
        self.find_best();
        Ok(())
    }

    /// Whether child `a` comes before child `b` in the direction of travel (equal keys: the
    /// lower index first going forward, as LevelDB's merge yields them; mirrored backward).
    fn before(&self, a: usize, b: usize) -> bool {
        let ord = self.order.compare_internal(self.children[a].key(), self.children[b].key());
        match self.direction {
            Direction::Forward => ord == Ordering::Less || (ord == Ordering::Equal && a < b),
            Direction::Reverse => ord == Ordering::Greater || (ord == Ordering::Equal && a > b),
        }
    }

    /// Pick the best child in the direction of travel, and the runner-up, scanning all.
    fn find_best(&mut self) {
        let (mut best, mut second): (Option<usize>, Option<usize>) = (None, None);
        for i in 0..self.children.len() {
            if !self.children[i].valid() {
                continue;
            }
            match best {
                Some(b) if !self.before(i, b) => {
                    if second.is_none_or(|s| self.before(i, s)) {
                        second = Some(i);
                    }
                }
                _ => {
                    second = best;
                    best = Some(i);
                }
            }
        }
        self.current = best;
        self.runner_up = second;
    }

    /// After the current child moved: it stays current while it is still ahead of the
    /// runner-up (no other child moved, so the runner-up is still the best of them).
    fn after_current_moved(&mut self, cur: usize) {
        if !self.children[cur].valid() {
            self.find_best();
        } else if self.runner_up.is_none_or(|r| self.before(cur, r)) {
            self.current = Some(cur);
        } else {
            self.find_best();
        }
    }

    fn cur(&self) -> usize {
        debug_assert!(self.current.is_some(), "merging iterator used while invalid");
        self.current.unwrap_or(0)
    }

    /// The direction invariant LevelDB's MergingIterator relies on: moving forward, every
    /// other valid child is at or after the current key; moving backward, at or before it.
    fn children_agree_with_direction(&self) -> bool {
        let Some(cur) = self.current else { return true };
        let key = self.children[cur].key();
        let wrong = match self.direction {
            Direction::Forward => Ordering::Less,
            Direction::Reverse => Ordering::Greater,
        };
        self.children
            .iter()
            .enumerate()
            .all(|(i, c)| i == cur || !c.valid() || self.order.compare_internal(c.key(), key) != wrong)
    }
}

impl<I: InternalIterator> InternalIterator for MergingIterator<I> {
    fn valid(&self) -> bool {
        self.current.is_some()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        for c in &mut self.children {
            c.seek_to_first()?;
        }
        self.direction = Direction::Forward;
        self.find_best();
        Ok(())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        for c in &mut self.children {
            c.seek_to_last()?;
        }
        self.direction = Direction::Reverse;
        self.find_best();
        Ok(())
    }
    fn prefetch(&mut self, target: &[u8]) {
        for c in &mut self.children {
            c.prefetch(target);
        }
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        // Each child's seek may wait for a block from the device: asked for first, the reads
        // of all the runs are in flight together, and a seek waits about as long as for one.
        if self.children.len() > 1 {
            self.prefetch(target);
        }
        for c in &mut self.children {
            c.seek(target)?;
        }
        self.direction = Direction::Forward;
        self.find_best();
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        debug_assert!(self.children_agree_with_direction(), "children out of step with the direction");
        let cur = self.cur();
        if self.direction != Direction::Forward {
            // Put every other child just after the current key.
            let key = self.children[cur].key().to_vec();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i == cur {
                    continue;
                }
                c.seek(&key)?;
                if c.valid() && self.order.compare_internal(c.key(), &key) == Ordering::Equal {
                    c.next()?;
                }
            }
            self.direction = Direction::Forward;
            debug_assert!(self.children_agree_with_direction(), "turning forward left a child behind");
            self.children[cur].next()?;
            self.find_best();
            return Ok(());
        }
        self.children[cur].next()?;
        self.after_current_moved(cur);
        Ok(())
    }
    fn prev(&mut self) -> Result<()> {
        debug_assert!(self.children_agree_with_direction(), "children out of step with the direction");
        let cur = self.cur();
        if self.direction != Direction::Reverse {
            // Put every other child just before the current key.
            let key = self.children[cur].key().to_vec();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i == cur {
                    continue;
                }
                c.seek(&key)?;
                if c.valid() {
                    c.prev()?;
                } else {
                    c.seek_to_last()?;
                }
            }
            self.direction = Direction::Reverse;
            debug_assert!(self.children_agree_with_direction(), "turning backward left a child ahead");
            self.children[cur].prev()?;
            self.find_best();
            return Ok(());
        }
        self.children[cur].prev()?;
        self.after_current_moved(cur);
        Ok(())
    }
    fn key(&self) -> &[u8] {
        self.children[self.cur()].key()
    }
    fn value(&self) -> &[u8] {
        self.children[self.cur()].value()
    }
    fn kept_value(&self) -> Option<&bytes::Bytes> {
        self.children[self.cur()].kept_value()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{compare_internal, make_internal_key, ValueKind};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// A child over sorted `(internal key, value)` pairs held in memory.
    struct VecIter {
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        at: Option<usize>,
    }

    impl InternalIterator for VecIter {
        fn valid(&self) -> bool {
            self.at.is_some()
        }
        fn seek_to_first(&mut self) -> Result<()> {
            self.at = (!self.entries.is_empty()).then_some(0);
            Ok(())
        }
        fn seek_to_last(&mut self) -> Result<()> {
            self.at = self.entries.len().checked_sub(1);
            Ok(())
        }
        fn seek(&mut self, target: &[u8]) -> Result<()> {
            let i = self.entries.partition_point(|(k, _)| compare_internal(k, target) == Ordering::Less);
            self.at = (i < self.entries.len()).then_some(i);
            Ok(())
        }
        fn next(&mut self) -> Result<()> {
            self.at = self.at.map(|i| i + 1).filter(|&i| i < self.entries.len());
            Ok(())
        }
        fn prev(&mut self) -> Result<()> {
            self.at = self.at.and_then(|i| i.checked_sub(1));
            Ok(())
        }
        fn key(&self) -> &[u8] {
            &self.entries[self.at.unwrap_or(0)].0
        }
        fn value(&self) -> &[u8] {
            &self.entries[self.at.unwrap_or(0)].1
        }
    }

    /// Random walks (seeks, steps both ways, turning around) over children of very different
    /// sizes — one run holding most keys, as a scan meets it — match the sorted union.
    #[test]
    fn random_walks_match_the_sorted_union_of_the_children() {
        let mut rng = StdRng::seed_from_u64(5);
        for round in 0..40 {
            let n = rng.gen_range(1..6);
            let mut all: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
            let mut seq = 0u64;
            for c in 0..n {
                let count = if c == 0 { rng.gen_range(0..300) } else { rng.gen_range(0..30) };
                let mut entries: Vec<(Vec<u8>, Vec<u8>)> = (0..count)
                    .map(|_| {
                        seq += 1;
                        let user = format!("k{:04}", rng.gen_range(0..200));
                        (make_internal_key(user.as_bytes(), seq, ValueKind::Value), format!("{c}").into_bytes())
                    })
                    .collect();
                entries.sort_by(|a, b| compare_internal(&a.0, &b.0));
                all.extend(entries.iter().cloned());
                children.push(Box::new(VecIter { entries, at: None }));
            }
            all.sort_by(|a, b| compare_internal(&a.0, &b.0));
            let mut it = MergingIterator::new(children, KeyOrder::default());
            let mut at: Option<usize> = None;
            for step in 0..500 {
                match rng.gen_range(0..10) {
                    0 => {
                        it.seek_to_first().unwrap();
                        at = (!all.is_empty()).then_some(0);
                    }
                    1 => {
                        it.seek_to_last().unwrap();
                        at = all.len().checked_sub(1);
                    }
                    2 => {
                        let user = format!("k{:04}", rng.gen_range(0..210));
                        let target = make_internal_key(user.as_bytes(), rng.gen_range(0..seq + 2), ValueKind::Value);
                        it.seek(&target).unwrap();
                        let i = all.partition_point(|(k, _)| compare_internal(k, &target) == Ordering::Less);
                        at = (i < all.len()).then_some(i);
                    }
                    3..=6 if it.valid() => {
                        it.next().unwrap();
                        at = at.map(|i| i + 1).filter(|&i| i < all.len());
                    }
                    _ if it.valid() => {
                        it.prev().unwrap();
                        at = at.and_then(|i| i.checked_sub(1));
                    }
                    _ => {}
                }
                assert_eq!(it.valid(), at.is_some(), "round {round} step {step}");
                if let Some(i) = at {
                    assert_eq!((it.key(), it.value()), (&all[i].0[..], &all[i].1[..]), "round {round} step {step}");
                }
            }
        }
    }
}
