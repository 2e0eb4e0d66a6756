//! Iterators: LevelDB's cursor over the database's keys (seek, step both ways, key and value
//! borrowed until the next move), with its error kept until the iterator is destroyed.

use std::ffi::c_char;

use wisckey::DbIterator;

use crate::db::leveldb_t;
use crate::options::leveldb_readoptions_t;
use crate::{bytes, drop_handle, handle, handle_mut, into_handle, quietly, save_error, status_text};

/// An iterator; `err` is the first error a move met (the iterator is invalid from then on).
pub struct leveldb_iterator_t {
    it: Option<DbIterator>,
    err: Option<String>,
}

impl leveldb_iterator_t {
    fn valid(&self) -> bool {
        self.err.is_none() && self.it.as_ref().is_some_and(DbIterator::valid)
    }

    fn step(&mut self, f: impl FnOnce(&mut DbIterator) -> wisckey::Result<()>) {
        if self.err.is_some() {
            return;
        }
        if let Some(it) = self.it.as_mut() {
            if let Err(e) = f(it) {
                self.err = Some(status_text(&e));
            }
        }
    }
}

/// An iterator over the database as `options` say (not positioned: seek first); destroy it
/// before closing the database. An iterator that could not be made reports why through
/// `leveldb_iter_get_error`.
#[no_mangle]
pub unsafe extern "C" fn leveldb_create_iterator(
    db: *mut leveldb_t,
    options: *const leveldb_readoptions_t,
) -> *mut leveldb_iterator_t {
    quietly(std::ptr::null_mut(), || {
        // SAFETY: c.h's contract: live handles.
        let made = unsafe { handle(db, "database").and_then(|db| Ok((db, handle(options, "read options")?))) };
        let iter = match made {
            Ok((db, ro)) => match db.db.iter(&ro.opts) {
                Ok(it) => leveldb_iterator_t { it: Some(it), err: None },
                Err(e) => leveldb_iterator_t { it: None, err: Some(status_text(&e)) },
            },
            Err(e) => leveldb_iterator_t { it: None, err: Some(e) },
        };
        into_handle(iter)
    })
}

/// Destroy an iterator.
#[no_mangle]
pub unsafe extern "C" fn leveldb_iter_destroy(it: *mut leveldb_iterator_t) {
    // SAFETY: c.h's contract.
    quietly((), || unsafe { drop_handle(it) })
}

/// Run `f` on the iterator behind `it` (a null `it`: nothing).
///
/// # Safety
/// `it` is null or a live iterator used by this thread alone.
unsafe fn step(it: *mut leveldb_iterator_t, f: impl FnOnce(&mut DbIterator) -> wisckey::Result<()>) {
    quietly((), || {
        // SAFETY: the caller's promise.
        if let Ok(it) = unsafe { handle_mut(it, "iterator") } {
            it.step(f);
        }
    })
}

/// Whether the iterator is at an entry.
#[no_mangle]
pub unsafe extern "C" fn leveldb_iter_valid(it: *const leveldb_iterator_t) -> u8 {
    // SAFETY: c.h's contract.
    quietly(0, || unsafe { handle(it, "iterator") }.is_ok_and(|it| it.valid()) as u8)
}

/// Go to the first key.
#[no_mangle]
pub unsafe extern "C" fn leveldb_iter_seek_to_first(it: *mut leveldb_iterator_t) {
    // SAFETY: c.h's contract.
    unsafe { step(it, DbIterator::seek_to_first) }
}

/// Go to the last key.
#[no_mangle]
pub unsafe extern "C" fn leveldb_iter_seek_to_last(it: *mut leveldb_iterator_t) {
    // SAFETY: c.h's contract.
    unsafe { step(it, DbIterator::seek_to_last) }
}

/// Go to the first key at or after `k` (in the database's order).
#[no_mangle]
pub unsafe extern "C" fn leveldb_iter_seek(it: *mut leveldb_iterator_t, k: *const c_char, klen: usize) {
    // SAFETY: c.h's contract: `k` holds `klen` bytes.
    match unsafe { bytes(k, klen, "key") } {
        // SAFETY: as above, for `it`.
        Ok(target) => unsafe { step(it, |i| i.seek(target)) },
        Err(e) => quietly((), || {
            // SAFETY: as above.
            if let Ok(it) = unsafe { handle_mut(it, "iterator") } {
                it.err.get_or_insert(e);
            }
        }),
    }
}

/// Go to the next key (while valid).
#[no_mangle]
pub unsafe extern "C" fn leveldb_iter_next(it: *mut leveldb_iterator_t) {
    // SAFETY: c.h's contract.
    unsafe { step(it, |i| if i.valid() { i.next() } else { Ok(()) }) }
}

/// Go to the previous key (while valid).
#[no_mangle]
pub unsafe extern "C" fn leveldb_iter_prev(it: *mut leveldb_iterator_t) {
    // SAFETY: c.h's contract.
    unsafe { step(it, |i| if i.valid() { i.prev() } else { Ok(()) }) }
}

/// The bytes `f` takes from a valid iterator, as a pointer valid until the next move and its
/// length in `*len`; null and 0 when the iterator is not valid.
///
/// # Safety
/// `it` is null or a live iterator; `len` is null or writable.
unsafe fn part(it: *const leveldb_iterator_t, len: *mut usize, f: fn(&DbIterator) -> &[u8]) -> *const c_char {
    quietly(std::ptr::null(), || {
        // SAFETY: the caller's promise.
        let got = unsafe { handle(it, "iterator") }.ok().filter(|it| it.valid()).and_then(|it| it.it.as_ref()).map(f);
        if !len.is_null() {
            // SAFETY: the caller's promise.
            unsafe { *len = got.map_or(0, <[u8]>::len) };
        }
        got.map_or(std::ptr::null(), |b| b.as_ptr().cast())
    })
}

/// The current key (valid until the iterator moves or is destroyed).
#[no_mangle]
pub unsafe extern "C" fn leveldb_iter_key(it: *const leveldb_iterator_t, klen: *mut usize) -> *const c_char {
    // SAFETY: c.h's contract.
    unsafe { part(it, klen, DbIterator::key) }
}

/// The current value (valid until the iterator moves or is destroyed).
#[no_mangle]
pub unsafe extern "C" fn leveldb_iter_value(it: *const leveldb_iterator_t, vlen: *mut usize) -> *const c_char {
    // SAFETY: c.h's contract.
    unsafe { part(it, vlen, DbIterator::value) }
}

/// The error a move met, if any, into `*errptr`.
#[no_mangle]
pub unsafe extern "C" fn leveldb_iter_get_error(it: *const leveldb_iterator_t, errptr: *mut *mut c_char) {
    quietly((), || {
        // SAFETY: c.h's contract for both pointers.
        unsafe {
            if let Some(e) = handle(it, "iterator").ok().and_then(|it| it.err.as_deref()) {
                save_error(errptr, e);
            }
        }
    })
}
