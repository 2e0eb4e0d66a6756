//! Write batches: puts and deletes applied atomically by `leveldb_write`.

use std::ffi::{c_char, c_void};

use wisckey::{BatchOp, WriteBatch};

use crate::{bytes, drop_handle, handle, handle_mut, into_handle, quietly};

/// A write batch (`wisckey::WriteBatch`).
pub struct leveldb_writebatch_t {
    pub(crate) batch: WriteBatch,
}

/// A new, empty batch.
#[no_mangle]
pub extern "C" fn leveldb_writebatch_create() -> *mut leveldb_writebatch_t {
    quietly(std::ptr::null_mut(), || into_handle(leveldb_writebatch_t { batch: WriteBatch::new() }))
}

/// Destroy a batch.
#[no_mangle]
pub unsafe extern "C" fn leveldb_writebatch_destroy(b: *mut leveldb_writebatch_t) {
    // SAFETY: c.h's contract.
    quietly((), || unsafe { drop_handle(b) })
}

/// Apply `f` to the batch behind `b` (a null `b`: nothing).
///
/// # Safety
/// `b` is null or a live batch used by this thread alone.
unsafe fn update(b: *mut leveldb_writebatch_t, f: impl FnOnce(&mut WriteBatch)) {
    quietly((), || {
        // SAFETY: the caller's promise.
        if let Ok(b) = unsafe { handle_mut(b, "write batch") } {
            f(&mut b.batch);
        }
    })
}

/// Drop every operation of the batch.
#[no_mangle]
pub unsafe extern "C" fn leveldb_writebatch_clear(b: *mut leveldb_writebatch_t) {
    // SAFETY: c.h's contract.
    unsafe { update(b, WriteBatch::clear) }
}

/// Queue setting `key` to `val` (a null buffer with a non-zero length is ignored).
#[no_mangle]
pub unsafe extern "C" fn leveldb_writebatch_put(
    b: *mut leveldb_writebatch_t,
    key: *const c_char,
    klen: usize,
    val: *const c_char,
    vlen: usize,
) {
    // SAFETY: c.h's contract: the buffers hold their lengths.
    let kv = unsafe { bytes(key, klen, "key").and_then(|k| Ok((k, bytes(val, vlen, "value")?))) };
    if let Ok((k, v)) = kv {
        // SAFETY: as above, for `b`.
        unsafe {
            update(b, |batch| {
                batch.put(k, v);
            })
        }
    }
}

/// Queue removing `key`.
#[no_mangle]
pub unsafe extern "C" fn leveldb_writebatch_delete(b: *mut leveldb_writebatch_t, key: *const c_char, klen: usize) {
    // SAFETY: c.h's contract: the buffer holds its length.
    if let Ok(k) = unsafe { bytes(key, klen, "key") } {
        // SAFETY: as above, for `b`.
        unsafe {
            update(b, |batch| {
                batch.delete(k);
            })
        }
    }
}

/// Call `put(state, k, klen, v, vlen)` or `deleted(state, k, klen)` for each operation, in
/// order.
#[no_mangle]
pub unsafe extern "C" fn leveldb_writebatch_iterate(
    b: *const leveldb_writebatch_t,
    state: *mut c_void,
    put: Option<unsafe extern "C" fn(*mut c_void, *const c_char, usize, *const c_char, usize)>,
    deleted: Option<unsafe extern "C" fn(*mut c_void, *const c_char, usize)>,
) {
    quietly((), || {
        // SAFETY: c.h's contract: `b` is live.
        let Ok(b) = (unsafe { handle(b, "write batch") }) else { return };
        // c.h knows one keyspace (the default, id 0): a batch built through it holds its puts and
        // deletes only; anything else (another keyspace, a range delete, a GC pointer) has no
        // callback to go to and is skipped.
        let ops = b.batch.iter().map_while(Result::ok);
        for (_, op) in ops.filter(|&(ks, _)| ks == 0) {
            // SAFETY: the user's callbacks with their state and buffers valid for the call.
            unsafe {
                match op {
                    BatchOp::Put { key, value, .. } => {
                        if let Some(f) = put {
                            f(state, key.as_ptr().cast(), key.len(), value.as_ptr().cast(), value.len());
                        }
                    }
                    BatchOp::Delete { key } => {
                        if let Some(f) = deleted {
                            f(state, key.as_ptr().cast(), key.len());
                        }
                    }
                    _ => {}
                }
            }
        }
    })
}

/// Append every operation of `source` to `destination`.
#[no_mangle]
pub unsafe extern "C" fn leveldb_writebatch_append(
    destination: *mut leveldb_writebatch_t,
    source: *const leveldb_writebatch_t,
) {
    if destination.cast_const() == source {
        // Appending a batch to itself: append a copy.
        quietly((), || {
            // SAFETY: c.h's contract: a live batch.
            if let Ok(b) = unsafe { handle_mut(destination, "write batch") } {
                let copy = b.batch.clone();
                b.batch.append(&copy);
            }
        });
        return;
    }
    // SAFETY: c.h's contract: `source` is null or live, and not `destination`.
    let Ok(src) = quietly(Err(String::new()), || unsafe { handle(source, "source batch") }) else { return };
    // SAFETY: as above, for `destination`.
    unsafe { update(destination, |dst| dst.append(&src.batch)) }
}
