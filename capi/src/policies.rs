//! Comparators and filter policies made of C callbacks (`leveldb_comparator_create`,
//! `leveldb_filterpolicy_create`) and the built-in Bloom filter (`..._create_bloom`).
//!
//! A callback object lives as long as anything uses it: options and open databases hold
//! references, and its C destructor runs when the last one goes — after
//! `leveldb_..._destroy` and after every database opened with it is closed.

use std::cmp::Ordering;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Arc;

use wisckey::{Comparator, FilterPolicy};

use crate::{drop_handle, into_handle, quietly};

type Destructor = unsafe extern "C" fn(*mut c_void);
type NameFn = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type CompareFn = unsafe extern "C" fn(*mut c_void, *const c_char, usize, *const c_char, usize) -> c_int;
type CreateFilterFn =
    unsafe extern "C" fn(*mut c_void, *const *const c_char, *const usize, c_int, *mut usize) -> *mut c_char;
type KeyMayMatchFn = unsafe extern "C" fn(*mut c_void, *const c_char, usize, *const c_char, usize) -> u8;

/// The C state pointer of a callback object and its destructor, run once when it is dropped.
struct State {
    state: *mut c_void,
    destructor: Option<Destructor>,
}

// SAFETY: LevelDB's contract for callback objects: their functions may be called from any
// thread, concurrently (LevelDB calls comparators and filter policies from its background
// thread and every reader), so the state is shared as LevelDB shares it.
unsafe impl Send for State {}
// SAFETY: as above.
unsafe impl Sync for State {}

impl Drop for State {
    fn drop(&mut self) {
        if let Some(d) = self.destructor {
            // SAFETY: the destructor the user gave for this state, called once, when nothing
            // can call the object's functions any more.
            quietly((), || unsafe { d(self.state) });
        }
    }
}

/// The name a C object reports, read once (its `name` function is not called again).
///
/// # Safety
/// `name` is callable with `state` and returns null or a NUL-terminated string.
unsafe fn read_name(name: NameFn, state: *mut c_void) -> String {
    // SAFETY: the caller's promise.
    let p = unsafe { name(state) };
    if p.is_null() {
        return String::new();
    }
    // SAFETY: as above: a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A comparator of C callbacks.
pub(crate) struct CComparator {
    state: State,
    compare: CompareFn,
    name: String,
}

impl Comparator for CComparator {
    fn name(&self) -> &str {
        &self.name
    }

    fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
        // SAFETY: the user's compare function with its state and two valid buffers.
        let r = unsafe { (self.compare)(self.state.state, a.as_ptr().cast(), a.len(), b.as_ptr().cast(), b.len()) };
        r.cmp(&0)
    }
}

/// A comparator handle (c.h's comparators cannot shorten keys: the hooks keep keys as they
/// are).
pub struct leveldb_comparator_t {
    comparator: Arc<CComparator>,
}

impl leveldb_comparator_t {
    pub(crate) fn shared(&self) -> Arc<dyn Comparator> {
        self.comparator.clone()
    }
}

/// A comparator calling `compare(state, a, alen, b, blen)` (negative, zero, positive) and
/// named by `name(state)` (read once, now); `destructor(state)` runs when no options object or
/// database uses it any more. Null if `compare` or `name` is null.
#[no_mangle]
pub unsafe extern "C" fn leveldb_comparator_create(
    state: *mut c_void,
    destructor: Option<Destructor>,
    compare: Option<CompareFn>,
    name: Option<NameFn>,
) -> *mut leveldb_comparator_t {
    quietly(std::ptr::null_mut(), || {
        let (Some(compare), Some(name)) = (compare, name) else {
            return std::ptr::null_mut();
        };
        let state = State { state, destructor };
        // SAFETY: c.h's contract for `name`.
        let name = unsafe { read_name(name, state.state) };
        into_handle(leveldb_comparator_t { comparator: Arc::new(CComparator { state, compare, name }) })
    })
}

/// Release the handle (the comparator lives on while options or databases use it).
#[no_mangle]
pub unsafe extern "C" fn leveldb_comparator_destroy(c: *mut leveldb_comparator_t) {
    // SAFETY: c.h's contract.
    quietly((), || unsafe { drop_handle(c) })
}

/// A filter policy of C callbacks.
pub(crate) struct CFilterPolicy {
    state: State,
    create: CreateFilterFn,
    key_may_match: KeyMayMatchFn,
    name: String,
}

impl FilterPolicy for CFilterPolicy {
    fn name(&self) -> &str {
        &self.name
    }

    fn create_filter(&self, keys: &[&[u8]]) -> Vec<u8> {
        let ptrs: Vec<*const c_char> = keys.iter().map(|k| k.as_ptr().cast()).collect();
        let lens: Vec<usize> = keys.iter().map(|k| k.len()).collect();
        // A table holds far fewer keys than fit an int (it is a few MiB).
        let n = c_int::try_from(keys.len()).unwrap_or(c_int::MAX);
        let mut len = 0usize;
        // SAFETY: the user's function with its state, `n` key pointers and lengths that stay
        // valid for the call, and a place for the filter's length.
        let filter = unsafe { (self.create)(self.state.state, ptrs.as_ptr(), lens.as_ptr(), n, &mut len) };
        if filter.is_null() {
            return Vec::new();
        }
        // SAFETY: c.h's contract: the filter is a `malloc`ed block of `len` bytes, ours to free.
        unsafe {
            let out = std::slice::from_raw_parts(filter.cast::<u8>(), len).to_vec();
            libc::free(filter.cast());
            out
        }
    }

    fn key_may_match(&self, key: &[u8], filter: &[u8]) -> bool {
        // SAFETY: the user's function with its state and two valid buffers.
        unsafe {
            (self.key_may_match)(self.state.state, key.as_ptr().cast(), key.len(), filter.as_ptr().cast(), filter.len())
                != 0
        }
    }
}

/// What a filter-policy handle stands for.
#[derive(Clone)]
pub(crate) enum PolicyKind {
    /// C callbacks.
    Custom(Arc<CFilterPolicy>),
    /// wisckey's built-in Bloom filter at this many bits per key.
    Bloom(c_int),
}

/// A filter-policy handle.
pub struct leveldb_filterpolicy_t {
    pub(crate) kind: PolicyKind,
}

/// A filter policy calling `create_filter(state, keys, key_lengths, num_keys, &filter_length)`
/// (returning a `malloc`ed filter) and `key_may_match(state, key, length, filter,
/// filter_length)`, named by `name(state)` (read once, now); `destructor(state)` runs when
/// nothing uses it any more. Null if a function is null.
#[no_mangle]
pub unsafe extern "C" fn leveldb_filterpolicy_create(
    state: *mut c_void,
    destructor: Option<Destructor>,
    create_filter: Option<CreateFilterFn>,
    key_may_match: Option<KeyMayMatchFn>,
    name: Option<NameFn>,
) -> *mut leveldb_filterpolicy_t {
    quietly(std::ptr::null_mut(), || {
        let (Some(create), Some(key_may_match), Some(name)) = (create_filter, key_may_match, name) else {
            return std::ptr::null_mut();
        };
        let state = State { state, destructor };
        // SAFETY: c.h's contract for `name`.
        let name = unsafe { read_name(name, state.state) };
        let policy = Arc::new(CFilterPolicy { state, create, key_may_match, name });
        into_handle(leveldb_filterpolicy_t { kind: PolicyKind::Custom(policy) })
    })
}

/// wisckey's built-in Bloom filter at `bits_per_key` bits per key.
#[no_mangle]
pub extern "C" fn leveldb_filterpolicy_create_bloom(bits_per_key: c_int) -> *mut leveldb_filterpolicy_t {
    quietly(std::ptr::null_mut(), || into_handle(leveldb_filterpolicy_t { kind: PolicyKind::Bloom(bits_per_key) }))
}

/// Release the handle (the policy lives on while options or databases use it).
#[no_mangle]
pub unsafe extern "C" fn leveldb_filterpolicy_destroy(p: *mut leveldb_filterpolicy_t) {
    // SAFETY: c.h's contract.
    quietly((), || unsafe { drop_handle(p) })
}
