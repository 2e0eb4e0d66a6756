//! The database handle and its operations: open and close, reads and writes, snapshots,
//! properties and approximate sizes, manual compaction, destroy and repair.

use std::ffi::{c_char, c_int, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use wisckey::{Db, RecoveryMode, Snapshot};

use crate::batch::leveldb_writebatch_t;
use crate::options::{leveldb_options_t, leveldb_readoptions_t, leveldb_writeoptions_t};
use crate::{
    bytes, c_str, drop_handle, handle, into_handle, malloc_copy, malloc_cstring, quietly, status_text, with_errptr,
    CResult,
};

/// An open database.
pub struct leveldb_t {
    pub(crate) db: Db,
}

/// A snapshot: reads through read options carrying it see the database as it was.
pub struct leveldb_snapshot_t {
    pub(crate) snapshot: Snapshot,
}

/// The path a C string names.
///
/// # Safety
/// As `c_str`.
unsafe fn path<'a>(name: *const c_char) -> CResult<&'a Path> {
    // SAFETY: the caller's promise.
    let name = unsafe { c_str(name, "database name") }?;
    Ok(Path::new(OsStr::from_bytes(name)))
}

/// Open (or create, with `create_if_missing`) the database at `name`; null and `*errptr` set
/// on failure.
#[no_mangle]
pub unsafe extern "C" fn leveldb_open(
    options: *const leveldb_options_t,
    name: *const c_char,
    errptr: *mut *mut c_char,
) -> *mut leveldb_t {
    // SAFETY: c.h's contract for every pointer.
    unsafe {
        with_errptr(errptr, std::ptr::null_mut(), || {
            let opts = handle(options, "options")?;
            let db = Db::open(path(name)?, opts.opts.clone()).map_err(|e| status_text(&e))?;
            Ok(into_handle(leveldb_t { db }))
        })
    }
}

/// Close the database (writes buffered in the log are written out) and free the handle.
#[no_mangle]
pub unsafe extern "C" fn leveldb_close(db: *mut leveldb_t) {
    quietly((), || {
        if db.is_null() {
            return;
        }
        // SAFETY: c.h's contract: `db` came from `leveldb_open` and is not used again.
        let db = unsafe { Box::from_raw(db) };
        if let Err(e) = db.db.close() {
            eprintln!("wisckey: closing the database failed: {e}");
        }
    })
}

/// The database behind `db` and the options behind `o` (errors when either is null).
///
/// # Safety
/// Live handles or null.
unsafe fn db_and<'a, T>(db: *mut leveldb_t, o: *const T, what: &str) -> CResult<(&'a Db, &'a T)> {
    // SAFETY: the caller's promise.
    unsafe { Ok((&handle(db, "database")?.db, handle(o, what)?)) }
}

/// Set `key` to `val`.
#[no_mangle]
pub unsafe extern "C" fn leveldb_put(
    db: *mut leveldb_t,
    options: *const leveldb_writeoptions_t,
    key: *const c_char,
    keylen: usize,
    val: *const c_char,
    vallen: usize,
    errptr: *mut *mut c_char,
) {
    // SAFETY: c.h's contract for every pointer.
    unsafe {
        with_errptr(errptr, (), || {
            let (db, wo) = db_and(db, options, "write options")?;
            let (k, v) = (bytes(key, keylen, "key")?, bytes(val, vallen, "value")?);
            db.put_opt(&wo.opts, k, v).map_err(|e| status_text(&e))
        })
    }
}

/// Remove `key` (not an error when absent).
#[no_mangle]
pub unsafe extern "C" fn leveldb_delete(
    db: *mut leveldb_t,
    options: *const leveldb_writeoptions_t,
    key: *const c_char,
    keylen: usize,
    errptr: *mut *mut c_char,
) {
    // SAFETY: c.h's contract for every pointer.
    unsafe {
        with_errptr(errptr, (), || {
            let (db, wo) = db_and(db, options, "write options")?;
            db.delete_opt(&wo.opts, bytes(key, keylen, "key")?).map_err(|e| status_text(&e))
        })
    }
}

/// Apply `batch` atomically.
#[no_mangle]
pub unsafe extern "C" fn leveldb_write(
    db: *mut leveldb_t,
    options: *const leveldb_writeoptions_t,
    batch: *mut leveldb_writebatch_t,
    errptr: *mut *mut c_char,
) {
    // SAFETY: c.h's contract for every pointer.
    unsafe {
        with_errptr(errptr, (), || {
            let (db, wo) = db_and(db, options, "write options")?;
            db.write(&wo.opts, &handle(batch, "write batch")?.batch).map_err(|e| status_text(&e))
        })
    }
}

/// The value of `key` as a `malloc`ed array of `*vallen` bytes (free with `leveldb_free`);
/// null (and `*vallen` 0) when absent or on error.
#[no_mangle]
pub unsafe extern "C" fn leveldb_get(
    db: *mut leveldb_t,
    options: *const leveldb_readoptions_t,
    key: *const c_char,
    keylen: usize,
    vallen: *mut usize,
    errptr: *mut *mut c_char,
) -> *mut c_char {
    // SAFETY: c.h's contract for every pointer; `vallen` is checked for null.
    unsafe {
        if !vallen.is_null() {
            *vallen = 0;
        }
        with_errptr(errptr, std::ptr::null_mut(), || {
            let (db, ro) = db_and(db, options, "read options")?;
            let Some(v) = db.get_opt(&ro.opts, bytes(key, keylen, "key")?).map_err(|e| status_text(&e))? else {
                return Ok(std::ptr::null_mut());
            };
            let copy = malloc_copy(&v);
            if copy.is_null() {
                return Err(format!("IO error: out of memory for a value of {} bytes", v.len()));
            }
            if !vallen.is_null() {
                *vallen = v.len();
            }
            Ok(copy)
        })
    }
}

/// A snapshot of the database now; release it with `leveldb_release_snapshot`.
#[no_mangle]
pub unsafe extern "C" fn leveldb_create_snapshot(db: *mut leveldb_t) -> *const leveldb_snapshot_t {
    quietly(std::ptr::null(), || {
        // SAFETY: c.h's contract.
        match unsafe { handle(db, "database") } {
            Ok(db) => into_handle(leveldb_snapshot_t { snapshot: db.db.snapshot() }),
            Err(_) => std::ptr::null(),
        }
    })
}

/// Release a snapshot (read options still naming it keep reading as of it until changed).
#[no_mangle]
pub unsafe extern "C" fn leveldb_release_snapshot(_db: *mut leveldb_t, snapshot: *const leveldb_snapshot_t) {
    // SAFETY: c.h's contract: `snapshot` came from `leveldb_create_snapshot`.
    quietly((), || unsafe { drop_handle(snapshot.cast_mut()) })
}

/// The value of property `propname` (`Db::property`: `leveldb.stats`,
/// `leveldb.num-files-at-level<N>`, `leveldb.sstables`, `leveldb.approximate-memory-usage`, ...)
/// as a `malloc`ed string; null for an unknown name.
#[no_mangle]
pub unsafe extern "C" fn leveldb_property_value(db: *mut leveldb_t, propname: *const c_char) -> *mut c_char {
    quietly(std::ptr::null_mut(), || {
        // SAFETY: c.h's contract.
        let (Ok(db), Ok(name)) = (unsafe { handle(db, "database") }, unsafe { c_str(propname, "property name") })
        else {
            return std::ptr::null_mut();
        };
        let value = std::str::from_utf8(name).ok().and_then(|n| db.db.property(n));
        value.map_or(std::ptr::null_mut(), |v| malloc_cstring(&v))
    })
}

/// Approximate bytes of each of `num_ranges` key ranges `[start, limit)` into `sizes`
/// (`Db::approximate_sizes`: table bytes plus the range's share of the separated values).
#[no_mangle]
pub unsafe extern "C" fn leveldb_approximate_sizes(
    db: *mut leveldb_t,
    num_ranges: c_int,
    range_start_key: *const *const c_char,
    range_start_key_len: *const usize,
    range_limit_key: *const *const c_char,
    range_limit_key_len: *const usize,
    sizes: *mut u64,
) {
    quietly((), || {
        let n = usize::try_from(num_ranges).unwrap_or(0);
        let arrays = [
            range_start_key.cast::<()>(),
            range_start_key_len.cast(),
            range_limit_key.cast(),
            range_limit_key_len.cast(),
        ];
        if n == 0 || sizes.is_null() || arrays.iter().any(|p| p.is_null()) {
            return;
        }
        // SAFETY: c.h's contract: `db` is live, and each array holds `num_ranges` entries whose
        // keys are valid for their lengths; `sizes` has room for `num_ranges` results.
        unsafe {
            let Ok(db) = handle(db, "database") else { return };
            let mut ranges = Vec::with_capacity(n);
            for i in 0..n {
                let start = bytes(*range_start_key.add(i), *range_start_key_len.add(i), "range start");
                let limit = bytes(*range_limit_key.add(i), *range_limit_key_len.add(i), "range limit");
                ranges.push((start.unwrap_or_default(), limit.unwrap_or_default()));
            }
            for (i, size) in db.db.approximate_sizes(&ranges).into_iter().enumerate() {
                *sizes.add(i) = size;
            }
        }
    })
}

/// Compact the tables overlapping `[start, limit]` (a null key: unbounded on that side).
#[no_mangle]
pub unsafe extern "C" fn leveldb_compact_range(
    db: *mut leveldb_t,
    start_key: *const c_char,
    start_key_len: usize,
    limit_key: *const c_char,
    limit_key_len: usize,
) {
    quietly((), || {
        // SAFETY: c.h's contract: `db` is live; non-null keys hold their lengths.
        let r: CResult<()> = unsafe {
            (|| {
                let db = handle(db, "database")?;
                let start = if start_key.is_null() { None } else { Some(bytes(start_key, start_key_len, "start")?) };
                let limit = if limit_key.is_null() { None } else { Some(bytes(limit_key, limit_key_len, "limit")?) };
                db.db.compact_range(start, limit).map_err(|e| status_text(&e))
            })()
        };
        if let Err(e) = r {
            eprintln!("wisckey: leveldb_compact_range failed: {e}");
        }
    })
}

/// Delete the database at `name` (`wisckey::destroy`); not an error when it does not exist.
#[no_mangle]
pub unsafe extern "C" fn leveldb_destroy_db(
    options: *const leveldb_options_t,
    name: *const c_char,
    errptr: *mut *mut c_char,
) {
    // SAFETY: c.h's contract for every pointer.
    unsafe {
        with_errptr(errptr, (), || {
            let opts = handle(options, "options")?;
            wisckey::destroy(path(name)?, &opts.opts).map_err(|e| status_text(&e))
        })
    }
}

/// Repair the database at `name`: open it with the salvaging recovery mode (wisckey's
/// `repair`: every valid record group of a damaged log is kept, what is lost is reported in
/// `DIR/lost/`), then close it.
#[no_mangle]
pub unsafe extern "C" fn leveldb_repair_db(
    options: *const leveldb_options_t,
    name: *const c_char,
    errptr: *mut *mut c_char,
) {
    // SAFETY: c.h's contract for every pointer.
    unsafe {
        with_errptr(errptr, (), || {
            let opts = handle(options, "options")?.opts.clone().create_if_missing(false).error_if_exists(false);
            let db =
                Db::open(path(name)?, opts.recovery_mode(RecoveryMode::SkipDamaged)).map_err(|e| status_text(&e))?;
            if let Some(report) = db.recovery_report() {
                eprintln!("wisckey: repair: {report}");
            }
            db.close().map_err(|e| status_text(&e))
        })
    }
}
