//! LevelDB's C API (`include/leveldb/c.h` of LevelDB 1.23, installed with this library) over
//! the `wisckey` engine, so programs and bindings written for LevelDB's C API run on wisckey
//! unchanged: every function of the header, with LevelDB's conventions.
//!
//! - Errors come back through `char** errptr` as `malloc`ed strings ("IO error: ...",
//!   "Corruption: ...", "Invalid argument: ..."), the previous message freed first; success
//!   leaves `*errptr` alone. Functions without an `errptr` report nothing.
//! - No panic crosses into C: every entry point runs inside `catch_unwind`, and a panic is
//!   reported as an error (or a null/zero result where there is no `errptr`).
//! - Null pointers are checked: a null handle or a null buffer with a non-zero length is an
//!   error (or a no-op), never a crash.
//! - A `leveldb_t` may be used from several threads at once, as LevelDB's; iterators, write
//!   batches and options objects are used by one thread at a time, as in LevelDB.
//!
//! Where wisckey's options differ from LevelDB's: `leveldb_options_create` starts from
//! wisckey's defaults (a Bloom filter included), except that `create_if_missing` is off as in
//! LevelDB; sizes are clipped to LevelDB's ranges as LevelDB's `SanitizeOptions` does; a cache
//! sets the database's block-cache capacity (wisckey's caches are per database); snappy
//! compression is served by lz4; the env and info log are accepted and ignored (wisckey always
//! uses the POSIX file system and `tracing` for its log).
//!
//! # Safety
//! Every function is `unsafe`: the caller keeps the contract of `c.h` (pointers passed are
//! valid or null, buffers hold the lengths given, a handle is not used after it is destroyed).
//! Inside, raw pointers are only read through the checked helpers of this module.

#![deny(missing_docs)]
#![allow(non_camel_case_types, clippy::missing_safety_doc)]

use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

mod batch;
mod db;
mod iter;
mod options;
mod policies;

pub use batch::*;
pub use db::*;
pub use iter::*;
pub use options::*;
pub use policies::*;

/// What an entry point failed with: the message `errptr` receives.
type CResult<T> = Result<T, String>;

/// LevelDB's status text for an engine error: its code name, then the message.
fn status_text(e: &wisckey::Error) -> String {
    use wisckey::Error;
    let code = match e {
        Error::Corruption { .. } => "Corruption",
        Error::InvalidArgument { .. }
        | Error::IncompatibleOptions { .. }
        | Error::NotADatabase { .. }
        | Error::AlreadyExists { .. } => "Invalid argument",
        _ => "IO error",
    };
    format!("{code}: {e}")
}

/// `malloc`ed copy of `bytes` (at least one byte is allocated, so an empty value is not
/// null); null when `malloc` fails.
fn malloc_copy(bytes: &[u8]) -> *mut c_char {
    // SAFETY: malloc of a non-zero size; the copy writes `bytes.len()` bytes into the block
    // it returned, which is at least that large, and the regions cannot overlap.
    unsafe {
        let p = libc::malloc(bytes.len().max(1)).cast::<u8>();
        if !p.is_null() {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
        }
        p.cast()
    }
}

/// `malloc`ed, NUL-terminated copy of `s` (an interior NUL is written as `\0`).
fn malloc_cstring(s: &str) -> *mut c_char {
    let mut bytes = s.replace('\0', "\\0").into_bytes();
    bytes.push(0);
    malloc_copy(&bytes)
}

/// Store `msg` in `*errptr`, freeing the message it held (LevelDB's `SaveError`).
///
/// # Safety
/// `errptr` is null or points to a `char*` that is null or `malloc`ed.
unsafe fn save_error(errptr: *mut *mut c_char, msg: &str) {
    if errptr.is_null() {
        return;
    }
    // SAFETY: the caller's promise: `*errptr` is readable and writable, and a non-null value
    // was `malloc`ed (c.h's rule), so `free` may take it.
    unsafe {
        let old = *errptr;
        if !old.is_null() {
            libc::free(old.cast());
        }
        *errptr = malloc_cstring(msg);
    }
}

/// The message of a caught panic.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    format!("IO error: wisckey panicked: {what}")
}

/// Run `f` for an entry point with an `errptr`: its error or a panic goes to `*errptr`, and
/// `fallback` is returned instead.
///
/// # Safety
/// As `save_error`.
unsafe fn with_errptr<T>(errptr: *mut *mut c_char, fallback: T, f: impl FnOnce() -> CResult<T>) -> T {
    let msg = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => return v,
        Ok(Err(msg)) => msg,
        Err(panic) => panic_text(&*panic),
    };
    // SAFETY: the caller's promise.
    unsafe { save_error(errptr, &msg) };
    fallback
}

/// Run `f` for an entry point without an `errptr`: a panic gives `fallback` (and the panic
/// message on stderr, from the panic hook).
fn quietly<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// The `len` bytes at `p`: a null `p` is an empty slice when `len` is 0, else an error.
///
/// # Safety
/// A non-null `p` points to `len` readable bytes that stay valid and unchanged for `'a`.
unsafe fn bytes<'a>(p: *const c_char, len: usize, what: &str) -> CResult<&'a [u8]> {
    if p.is_null() {
        return match len {
            0 => Ok(&[]),
            _ => Err(format!("Invalid argument: {what} is NULL with length {len}")),
        };
    }
    if len > isize::MAX as usize {
        return Err(format!("Invalid argument: {what} length {len} is too large"));
    }
    // SAFETY: the caller's promise, and the length fits an allocation.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// The NUL-terminated string at `p`, as bytes (an error when null).
///
/// # Safety
/// A non-null `p` points to a NUL-terminated string that stays valid for `'a`.
unsafe fn c_str<'a>(p: *const c_char, what: &str) -> CResult<&'a [u8]> {
    if p.is_null() {
        return Err(format!("Invalid argument: {what} is NULL"));
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// The object a handle points to (an error when null).
///
/// # Safety
/// A non-null `p` came from this library's constructor of `T` and was not destroyed.
unsafe fn handle<'a, T>(p: *const T, what: &str) -> CResult<&'a T> {
    // SAFETY: the caller's promise.
    unsafe { p.as_ref() }.ok_or_else(|| format!("Invalid argument: {what} is NULL"))
}

/// As `handle`, for a handle the entry point changes.
///
/// # Safety
/// As `handle`, and no other reference to the object is in use.
unsafe fn handle_mut<'a, T>(p: *mut T, what: &str) -> CResult<&'a mut T> {
    // SAFETY: the caller's promise.
    unsafe { p.as_mut() }.ok_or_else(|| format!("Invalid argument: {what} is NULL"))
}

/// Box `v` for C.
fn into_handle<T>(v: T) -> *mut T {
    Box::into_raw(Box::new(v))
}

/// Free a handle made by `into_handle` (null: nothing).
///
/// # Safety
/// A non-null `p` came from `into_handle::<T>` and is not used again.
unsafe fn drop_handle<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: the caller's promise.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// Calls `free(ptr)`: for memory this library `malloc`ed (values, property values, error
/// messages, the test directory).
#[no_mangle]
pub unsafe extern "C" fn leveldb_free(ptr: *mut std::ffi::c_void) {
    // SAFETY: c.h's contract: `ptr` is null or came from `malloc`.
    unsafe { libc::free(ptr) }
}

/// The major version of LevelDB's API this library implements (1).
#[no_mangle]
pub extern "C" fn leveldb_major_version() -> std::ffi::c_int {
    1
}

/// The minor version of LevelDB's API this library implements (23).
#[no_mangle]
pub extern "C" fn leveldb_minor_version() -> std::ffi::c_int {
    23
}

#[cfg(test)]
mod tests;
