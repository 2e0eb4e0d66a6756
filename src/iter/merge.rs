//! Merges several sorted internal iterators into one sorted stream (LevelDB's MergingIterator).
//! Children are few (memtables + L0 files + one per sorted run), so a linear scan for the
//! smallest/largest child is as fast as a heap and simpler.

use std::cmp::Ordering;

use super::InternalIterator;
use crate::error::Result;
use crate::key::compare_internal;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Reverse,
}

/// A merge of child iterators; equal keys from several children come out in child order.
pub struct MergingIterator {
    children: Vec<Box<dyn InternalIterator>>,
    current: Option<usize>,
    direction: Direction,
}

impl MergingIterator {
    pub fn new(children: Vec<Box<dyn InternalIterator>>) -> Self {
        MergingIterator { children, current: None, direction: Direction::Forward }
    }

    fn find_smallest(&mut self) {
        let mut best: Option<usize> = None;
        for (i, c) in self.children.iter().enumerate() {
            if c.valid() {
                match best {
                    Some(b) if compare_internal(c.key(), self.children[b].key()) != Ordering::Less => {}
                    _ => best = Some(i),
                }
            }
        }
        self.current = best;
    }

    fn find_largest(&mut self) {
        let mut best: Option<usize> = None;
        for (i, c) in self.children.iter().enumerate().rev() {
            if c.valid() {
                match best {
                    Some(b) if compare_internal(c.key(), self.children[b].key()) != Ordering::Greater => {}
                    _ => best = Some(i),
                }
            }
        }
        self.current = best;
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
        self.children.iter().enumerate().all(|(i, c)| i == cur || !c.valid() || compare_internal(c.key(), key) != wrong)
    }
}

impl InternalIterator for MergingIterator {
    fn valid(&self) -> bool {
        self.current.is_some()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        for c in &mut self.children {
            c.seek_to_first()?;
        }
        self.direction = Direction::Forward;
        self.find_smallest();
        Ok(())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        for c in &mut self.children {
            c.seek_to_last()?;
        }
        self.direction = Direction::Reverse;
        self.find_largest();
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        for c in &mut self.children {
            c.seek(target)?;
        }
        self.direction = Direction::Forward;
        self.find_smallest();
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
                if c.valid() && compare_internal(c.key(), &key) == Ordering::Equal {
                    c.next()?;
                }
            }
            self.direction = Direction::Forward;
            debug_assert!(self.children_agree_with_direction(), "turning forward left a child behind");
        }
        self.children[cur].next()?;
        self.find_smallest();
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
        }
        self.children[cur].prev()?;
        self.find_largest();
        Ok(())
    }
    fn key(&self) -> &[u8] {
        self.children[self.cur()].key()
    }
    fn value(&self) -> &[u8] {
        self.children[self.cur()].value()
    }
}
