//! Options objects: `leveldb_options_t` (open options, LevelDB's sizes clipped to LevelDB's
//! ranges), read and write options, the cache (a capacity), the env (the POSIX one, always).

use std::ffi::{c_char, c_int};
use std::sync::Arc;

use wisckey::{Compression, FilterPolicy, Options, ReadOptions, WriteOptions};

use crate::policies::{leveldb_comparator_t, leveldb_filterpolicy_t, PolicyKind};
use crate::{drop_handle, handle, handle_mut, into_handle, malloc_cstring, quietly};

/// Open options: wisckey's `Options`, with LevelDB's `create_if_missing` default (off).
pub struct leveldb_options_t {
    pub(crate) opts: Options,
}

/// Read options (`wisckey::ReadOptions`).
pub struct leveldb_readoptions_t {
    pub(crate) opts: ReadOptions,
}

/// Write options (`wisckey::WriteOptions`).
pub struct leveldb_writeoptions_t {
    pub(crate) opts: WriteOptions,
}

/// A block cache's capacity: wisckey's block cache belongs to one database, so setting a cache
/// on options gives the database a block cache of this many bytes.
pub struct leveldb_cache_t {
    capacity: usize,
}

/// The default (POSIX) environment; the only one there is.
pub struct leveldb_env_t {
    _private: u8,
}

/// A logger; c.h has no way to make one, and `leveldb_options_set_info_log` ignores it.
pub struct leveldb_logger_t {
    _private: u8,
}

/// Apply `f` to the options behind `o` (a null `o`: nothing).
///
/// # Safety
/// `o` is null or a live options handle used by this thread alone.
unsafe fn update(o: *mut leveldb_options_t, f: impl FnOnce(&mut Options)) {
    quietly((), || {
        // SAFETY: the caller's promise.
        if let Ok(o) = unsafe { handle_mut(o, "options") } {
            f(&mut o.opts);
        }
    })
}

/// Apply setter `f` to the options behind `o`: a setting made through its setter counts as
/// named, so it wins over what an existing database recorded (the shaping settings).
///
/// # Safety
/// As `update`.
unsafe fn set(o: *mut leveldb_options_t, f: impl FnOnce(Options) -> Options) {
    // SAFETY: the caller's promise.
    unsafe { update(o, |opts| *opts = f(std::mem::take(opts))) }
}

/// LevelDB's `ClipToRange`: `v` into `[lo, hi]`.
fn clip(v: usize, lo: usize, hi: usize) -> usize {
    v.clamp(lo, hi)
}

/// New open options: wisckey's defaults, `create_if_missing` off (as in LevelDB).
#[no_mangle]
pub extern "C" fn leveldb_options_create() -> *mut leveldb_options_t {
    quietly(std::ptr::null_mut(), || {
        into_handle(leveldb_options_t { opts: Options::default().create_if_missing(false) })
    })
}

/// Destroy options (what they point to — comparator, filter policy — lives on while used).
#[no_mangle]
pub unsafe extern "C" fn leveldb_options_destroy(o: *mut leveldb_options_t) {
    // SAFETY: c.h's contract: `o` came from `leveldb_options_create`.
    quietly((), || unsafe { drop_handle(o) })
}

/// Set the key order (null: bytewise).
#[no_mangle]
pub unsafe extern "C" fn leveldb_options_set_comparator(o: *mut leveldb_options_t, cmp: *mut leveldb_comparator_t) {
    // SAFETY: c.h's contract: `cmp` is null or a live comparator.
    let c = quietly(None, || unsafe { handle(cmp, "comparator") }.ok().map(|c| c.shared()));
    // SAFETY: as above, for `o`.
    unsafe { update(o, |opts| opts.comparator = c) }
}

/// Set the filter policy: a custom one (its filter replaces the Bloom filter), the built-in
/// Bloom filter at its bits per key, or null (wisckey's default Bloom filter).
#[no_mangle]
pub unsafe extern "C" fn leveldb_options_set_filter_policy(o: *mut leveldb_options_t, p: *mut leveldb_filterpolicy_t) {
    // SAFETY: c.h's contract: `p` is null or a live filter policy.
    let kind = quietly(None, || unsafe { handle(p, "filter policy") }.ok().map(|p| p.kind.clone()));
    // SAFETY: as above, for `o`.
    unsafe {
        update(o, |opts| match kind {
            Some(PolicyKind::Custom(c)) => {
                opts.filter_policy = Some(c as Arc<dyn FilterPolicy>);
                opts.bloom_bits_per_key = Options::default().bloom_bits_per_key;
            }
            Some(PolicyKind::Bloom(bits)) => {
                *opts = std::mem::take(opts).bloom_bits_per_key(vec![f64::from(bits.max(0))]);
                opts.filter_policy = None;
            }
            None => {
                opts.filter_policy = None;
                opts.bloom_bits_per_key = Options::default().bloom_bits_per_key;
            }
        })
    }
}

/// Create the database if it is missing.
#[no_mangle]
pub unsafe extern "C" fn leveldb_options_set_create_if_missing(o: *mut leveldb_options_t, v: u8) {
    // SAFETY: c.h's contract.
    unsafe { update(o, |opts| opts.create_if_missing = v != 0) }
}

/// Refuse to open an existing database.
#[no_mangle]
pub unsafe extern "C" fn leveldb_options_set_error_if_exists(o: *mut leveldb_options_t, v: u8) {
    // SAFETY: c.h's contract.
    unsafe { update(o, |opts| opts.error_if_exists = v != 0) }
}

/// Check every block checksum on reads.
#[no_mangle]
pub unsafe extern "C" fn leveldb_options_set_paranoid_checks(o: *mut leveldb_options_t, v: u8) {
    // SAFETY: c.h's contract.
    unsafe { update(o, |opts| opts.paranoid_checks = v != 0) }
}

/// Accepted and ignored: wisckey always uses the POSIX file system.
#[no_mangle]
pub extern "C" fn leveldb_options_set_env(_o: *mut leveldb_options_t, _env: *mut leveldb_env_t) {}

/// Accepted and ignored: wisckey logs through `tracing`.
#[no_mangle]
pub extern "C" fn leveldb_options_set_info_log(_o: *mut leveldb_options_t, _log: *mut leveldb_logger_t) {}

/// Memtable size (LevelDB's range: 64 KiB to 1 GiB).
#[no_mangle]
pub unsafe extern "C" fn leveldb_options_set_write_buffer_size(o: *mut leveldb_options_t, v: usize) {
    // SAFETY: c.h's contract.
    unsafe { update(o, |opts| opts.write_buffer_bytes = clip(v, 64 << 10, 1 << 30)) }
}

/// Table readers kept open (LevelDB's range: 74 to 50000).
#[no_mangle]
pub unsafe extern "C" fn leveldb_options_set_max_open_files(o: *mut leveldb_options_t, v: c_int) {
    let v = usize::try_from(v).unwrap_or(0);
    // SAFETY: c.h's contract.
    unsafe { update(o, |opts| opts.max_open_files = clip(v, 64 + 10, 50000)) }
}

/// Give the database a block cache of the cache's capacity (null: wisckey's default).
#[no_mangle]
pub unsafe extern "C" fn leveldb_options_set_cache(o: *mut leveldb_options_t, c: *mut leveldb_cache_t) {
    // SAFETY: c.h's contract: `c` is null or a live cache.
    let capacity = quietly(None, || unsafe { handle(c, "cache") }.ok().map(|c| c.capacity));
    // SAFETY: as above, for `o`.
    unsafe { update(o, |opts| opts.block_cache_bytes = capacity.unwrap_or(Options::default().block_cache_bytes)) }
}

/// Uncompressed size of a data block (LevelDB's range: 1 KiB to 4 MiB).
#[no_mangle]
pub unsafe extern "C" fn leveldb_options_set_block_size(o: *mut leveldb_options_t, v: usize) {
    // SAFETY: c.h's contract.
    unsafe { set(o, |opts| opts.block_size_bytes(clip(v, 1 << 10, 4 << 20))) }
}

/// Entries between restart points of a data block (at least 1).
#[no_mangle]
pub unsafe extern "C" fn leveldb_options_set_block_restart_interval(o: *mut leveldb_options_t, v: c_int) {
    let v = usize::try_from(v).unwrap_or(1).max(1);
    // SAFETY: c.h's contract.
    unsafe { set(o, |opts| opts.block_restart_interval(v)) }
}

/// Target size of a table (LevelDB's range: 1 MiB to 1 GiB).
#[no_mangle]
pub unsafe extern "C" fn leveldb_options_set_max_file_size(o: *mut leveldb_options_t, v: usize) {
    // SAFETY: c.h's contract.
    unsafe { set(o, |opts| opts.target_file_size_bytes(clip(v, 1 << 20, 1 << 30) as u64)) }
}

/// `leveldb_no_compression` (0) or `leveldb_snappy_compression` (1, served by lz4: wisckey has
/// no snappy); any other value leaves the setting alone.
#[no_mangle]
pub unsafe extern "C" fn leveldb_options_set_compression(o: *mut leveldb_options_t, v: c_int) {
    let c = match v {
        0 => Some(Compression::None),
        1 => Some(Compression::Lz4),
        _ => None,
    };
    if let Some(c) = c {
        // SAFETY: c.h's contract.
        unsafe { set(o, |opts| opts.compression(c)) }
    }
}

/// New read options (LevelDB's defaults).
#[no_mangle]
pub extern "C" fn leveldb_readoptions_create() -> *mut leveldb_readoptions_t {
    quietly(std::ptr::null_mut(), || into_handle(leveldb_readoptions_t { opts: ReadOptions::default() }))
}

/// Destroy read options (a snapshot set on them stays valid until released).
#[no_mangle]
pub unsafe extern "C" fn leveldb_readoptions_destroy(o: *mut leveldb_readoptions_t) {
    // SAFETY: c.h's contract.
    quietly((), || unsafe { drop_handle(o) })
}

/// Apply `f` to the read options behind `o` (a null `o`: nothing).
///
/// # Safety
/// As `update`.
unsafe fn update_read(o: *mut leveldb_readoptions_t, f: impl FnOnce(&mut ReadOptions)) {
    quietly((), || {
        // SAFETY: the caller's promise.
        if let Ok(o) = unsafe { handle_mut(o, "read options") } {
            f(&mut o.opts);
        }
    })
}

/// Verify block checksums on reads.
#[no_mangle]
pub unsafe extern "C" fn leveldb_readoptions_set_verify_checksums(o: *mut leveldb_readoptions_t, v: u8) {
    // SAFETY: c.h's contract.
    unsafe { update_read(o, |ro| ro.verify_checksums = v != 0) }
}

/// Whether reads fill the caches (1: wisckey's default behaviour; 0: they do not).
#[no_mangle]
pub unsafe extern "C" fn leveldb_readoptions_set_fill_cache(o: *mut leveldb_readoptions_t, v: u8) {
    // SAFETY: c.h's contract.
    unsafe { update_read(o, |ro| ro.fill_cache = (v == 0).then_some(false)) }
}

/// Read as of `snap` (null: the latest state).
#[no_mangle]
pub unsafe extern "C" fn leveldb_readoptions_set_snapshot(
    o: *mut leveldb_readoptions_t,
    snap: *const crate::db::leveldb_snapshot_t,
) {
    // SAFETY: c.h's contract: `snap` is null or a live snapshot.
    let snapshot = quietly(None, || unsafe { handle(snap, "snapshot") }.ok().map(|s| s.snapshot.clone()));
    // SAFETY: as above, for `o`.
    unsafe { update_read(o, |ro| ro.snapshot = snapshot) }
}

/// New write options (not synced).
#[no_mangle]
pub extern "C" fn leveldb_writeoptions_create() -> *mut leveldb_writeoptions_t {
    quietly(std::ptr::null_mut(), || into_handle(leveldb_writeoptions_t { opts: WriteOptions::default() }))
}

/// Destroy write options.
#[no_mangle]
pub unsafe extern "C" fn leveldb_writeoptions_destroy(o: *mut leveldb_writeoptions_t) {
    // SAFETY: c.h's contract.
    quietly((), || unsafe { drop_handle(o) })
}

/// Sync the log before a write returns.
#[no_mangle]
pub unsafe extern "C" fn leveldb_writeoptions_set_sync(o: *mut leveldb_writeoptions_t, v: u8) {
    quietly((), || {
        // SAFETY: c.h's contract.
        if let Ok(o) = unsafe { handle_mut(o, "write options") } {
            o.opts.sync = v != 0;
        }
    })
}

/// A cache of `capacity` bytes (a database opened with it gets a block cache this large).
#[no_mangle]
pub extern "C" fn leveldb_cache_create_lru(capacity: usize) -> *mut leveldb_cache_t {
    quietly(std::ptr::null_mut(), || into_handle(leveldb_cache_t { capacity }))
}

/// Destroy a cache.
#[no_mangle]
pub unsafe extern "C" fn leveldb_cache_destroy(c: *mut leveldb_cache_t) {
    // SAFETY: c.h's contract.
    quietly((), || unsafe { drop_handle(c) })
}

/// The default environment.
#[no_mangle]
pub extern "C" fn leveldb_create_default_env() -> *mut leveldb_env_t {
    quietly(std::ptr::null_mut(), || into_handle(leveldb_env_t { _private: 0 }))
}

/// Destroy an environment handle.
#[no_mangle]
pub unsafe extern "C" fn leveldb_env_destroy(env: *mut leveldb_env_t) {
    // SAFETY: c.h's contract.
    quietly((), || unsafe { drop_handle(env) })
}

/// A directory for tests (LevelDB's: `$TEST_TMPDIR`, else `/tmp/leveldbtest-<euid>`), created
/// if missing; `malloc`ed, free with `leveldb_free`. Null if it cannot be created.
#[no_mangle]
pub extern "C" fn leveldb_env_get_test_directory(_env: *mut leveldb_env_t) -> *mut c_char {
    quietly(std::ptr::null_mut(), || {
        let dir = match std::env::var("TEST_TMPDIR") {
            Ok(d) if !d.is_empty() => d,
            // SAFETY: geteuid has no preconditions and cannot fail.
            _ => format!("/tmp/leveldbtest-{}", unsafe { libc::geteuid() }),
        };
        match std::fs::create_dir_all(&dir) {
            Ok(()) => malloc_cstring(&dir),
            Err(_) => std::ptr::null_mut(),
        }
    })
}
