//! Values written once: a `Set`'s value is stored when its log entry is appended — in the
//! `raft-values` keyspace, under the entry's index and the `Set`'s position in it, where
//! wisckey separates it into the value log — and applying the entry stores in the state only a
//! reference to it (a logical pointer: index and position). The value is therefore written
//! once per node, not once for the log and again for the state machine.
//!
//! Who deletes a value: it is needed while its log entry is in the log (followers read it
//! back to replicate) or while the state refers to it. Whichever lets go of it last deletes
//! it — a purge deletes the purged entries' values the state no longer refers to; applying an
//! overwrite or a delete deletes the old value when its entry is already purged; a snapshot
//! install deletes every value of a purged entry (one range tombstone: only the old state
//! could refer to one, and the installed state holds its values inline). All three decide
//! under one lock ([`crate::Shared::owner`]), so no value is deleted twice or leaked between
//! them; value-log GC then gives the space back as it does for any deleted value. docs/format/raft.md has the
//! bytes.

use openraft::EntryPayload;

use crate::{Entry, Request};

/// Tag of a state value stored as it is (small values, snapshot installs).
const INLINE: u8 = 0;
/// Tag of a state value that refers to a value in `raft-values`.
const REFERENCE: u8 = 1;

/// Where a `Set`'s value lives in `raft-values`: its entry's index and the `Set`'s position
/// among the entry's `Set`s (0 for a lone `Set`; in order for the `Set`s of a batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ValueAt {
    pub(crate) index: u64,
    pub(crate) pos: u32,
}

impl ValueAt {
    /// The `raft-values` key: index and position big-endian, so a range of indexes is a key
    /// range.
    pub(crate) fn key(self) -> [u8; 12] {
        let mut k = [0u8; 12];
        k[..8].copy_from_slice(&self.index.to_be_bytes());
        k[8..].copy_from_slice(&self.pos.to_be_bytes());
        k
    }

    /// The first `raft-values` key of the entry at `index`.
    pub(crate) fn first_of(index: u64) -> [u8; 12] {
        ValueAt { index, pos: 0 }.key()
    }
}

/// A state value as stored in `raft-state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StateValue<'a> {
    /// The value itself.
    Inline(&'a [u8]),
    /// The value is in `raft-values` at this place.
    Ref(ValueAt),
}

impl StateValue<'_> {
    /// The stored bytes: a tag byte, then the value or the 12-byte place.
    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            StateValue::Inline(v) => {
                let mut out = Vec::with_capacity(1 + v.len());
                out.push(INLINE);
                out.extend_from_slice(v);
                out
            }
            StateValue::Ref(at) => {
                let mut out = Vec::with_capacity(13);
                out.push(REFERENCE);
                out.extend_from_slice(&at.key());
                out
            }
        }
    }

    /// Decode stored bytes; `None` when they are not a state value of this format.
    pub(crate) fn decode(bytes: &[u8]) -> Option<StateValue<'_>> {
        match bytes.split_first()? {
            (&INLINE, v) => Some(StateValue::Inline(v)),
            (&REFERENCE, at) if at.len() == 12 => {
                let index = u64::from_be_bytes(at[..8].try_into().ok()?);
                let pos = u32::from_be_bytes(at[8..].try_into().ok()?);
                Some(StateValue::Ref(ValueAt { index, pos }))
            }
            _ => None,
        }
    }

    /// The place this value refers to, if it is a reference.
    pub(crate) fn place(bytes: &[u8]) -> Option<ValueAt> {
        match StateValue::decode(bytes)? {
            StateValue::Ref(at) => Some(at),
            StateValue::Inline(_) => None,
        }
    }
}

/// The `Set`s and `Delete`s of `request` in order, a batch's nested requests depth first: the
/// one walk that numbers a request's `Set`s, which appends ([`take_values`]) and applies must
/// agree on.
pub(crate) fn ops(request: &Request) -> Vec<&Request> {
    fn walk<'r>(request: &'r Request, out: &mut Vec<&'r Request>) {
        match request {
            Request::Batch(ops) => ops.iter().for_each(|op| walk(op, out)),
            other => out.push(other),
        }
    }
    let mut out = Vec::new();
    walk(request, &mut out);
    out
}

/// Call `f(position, key, value)` for each `Set` in `request`, numbered in [`ops`]' order.
pub(crate) fn for_each_set<'r>(request: &'r Request, f: &mut impl FnMut(u32, &'r str, &'r str)) {
    let sets = ops(request).into_iter().filter_map(|op| match op {
        Request::Set { key, value } => Some((key.as_str(), value.as_str())),
        _ => None,
    });
    for (pos, (key, value)) in (0u32..).zip(sets) {
        f(pos, key, value);
    }
}

/// Each `Set`'s value in `request`, moved out and replaced by an empty string, in position
/// order: what `raft-log` keeps of the entry is then small, the values go to `raft-values`.
pub(crate) fn take_values(entry: &mut Entry) -> Vec<String> {
    fn walk(request: &mut Request, out: &mut Vec<String>) {
        match request {
            Request::Set { value, .. } => out.push(std::mem::take(value)),
            Request::Delete { .. } => {}
            Request::Batch(ops) => ops.iter_mut().for_each(|op| walk(op, out)),
        }
    }
    let mut out = Vec::new();
    if let EntryPayload::Normal(request) = &mut entry.payload {
        walk(request, &mut out);
    }
    out
}

/// Put the values back into the `Set`s of `entry` (taken out by [`take_values`]), asking
/// `value(position)` for each; the first position `value` has nothing for is returned as an
/// error.
pub(crate) fn put_values(entry: &mut Entry, value: &mut impl FnMut(u32) -> Option<String>) -> Result<(), u32> {
    fn walk(request: &mut Request, next: &mut u32, value: &mut impl FnMut(u32) -> Option<String>) -> Result<(), u32> {
        match request {
            Request::Set { value: v, .. } => {
                *v = value(*next).ok_or(*next)?;
                *next += 1;
            }
            Request::Delete { .. } => {}
            Request::Batch(ops) => {
                for op in ops {
                    walk(op, next, value)?;
                }
            }
        }
        Ok(())
    }
    match &mut entry.payload {
        EntryPayload::Normal(request) => walk(request, &mut 0, value),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_values_round_trip_and_foreign_bytes_are_refused() {
        let at = ValueAt { index: 0x0102_0304_0506_0708, pos: 9 };
        let r = StateValue::Ref(at).encode();
        assert_eq!(StateValue::decode(&r), Some(StateValue::Ref(at)));
        let i = StateValue::Inline(b"abc").encode();
        assert_eq!(StateValue::decode(&i), Some(StateValue::Inline(b"abc")));
        assert_eq!(StateValue::decode(b""), None);
        assert_eq!(StateValue::decode(&[REFERENCE, 1, 2]), None);
        assert_eq!(StateValue::decode(&[7, 1]), None);
    }

    #[test]
    fn a_batchs_values_come_out_and_go_back_in_position_order() {
        let request = Request::Batch(vec![
            Request::Set { key: "a".into(), value: "1".into() },
            Request::Delete { key: "b".into() },
            Request::Batch(vec![Request::Set { key: "c".into(), value: "3".into() }]),
        ]);
        let mut entry = Entry { log_id: Default::default(), payload: EntryPayload::Normal(request.clone()) };
        let values = take_values(&mut entry);
        assert_eq!(values, ["1", "3"]);
        let mut seen = Vec::new();
        if let EntryPayload::Normal(r) = &entry.payload {
            for_each_set(r, &mut |pos, key, value| seen.push((pos, key.to_owned(), value.to_owned())));
        }
        assert_eq!(seen, [(0, "a".to_owned(), String::new()), (1, "c".to_owned(), String::new())]);
        put_values(&mut entry, &mut |pos| values.get(pos as usize).cloned()).expect("all values there");
        assert_eq!(entry.payload, EntryPayload::Normal(request));
        assert_eq!(put_values(&mut entry, &mut |pos| (pos == 0).then(String::new)), Err(1));
    }
}
