//! The boundary's promises, called as C calls them: null pointers and bad lengths are errors
//! (or no-ops), never crashes; an error message replaces the previous one; a panic comes back
//! as an error; one database serves several threads at once.

use std::ffi::{c_char, CStr, CString};
use std::ptr::{null, null_mut};

use super::*;

/// The message in `*err` (freed), if any.
fn take(err: &mut *mut c_char) -> Option<String> {
    if err.is_null() {
        return None;
    }
    // SAFETY: a message this library `malloc`ed, NUL-terminated, freed once here.
    let s = unsafe { CStr::from_ptr(*err) }.to_string_lossy().into_owned();
    unsafe { leveldb_free(err.cast()) };
    *err = null_mut();
    Some(s)
}

fn open(dir: &std::path::Path) -> *mut leveldb_t {
    let name = CString::new(dir.join("db").to_str().expect("utf-8 path")).expect("no NUL");
    let mut err = null_mut();
    // SAFETY: live options and a NUL-terminated name.
    unsafe {
        let o = leveldb_options_create();
        leveldb_options_set_create_if_missing(o, 1);
        let db = leveldb_open(o, name.as_ptr(), &mut err);
        leveldb_options_destroy(o);
        assert_eq!(take(&mut err), None);
        db
    }
}

#[test]
fn null_handles_and_buffers_are_errors_not_crashes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path());
    let mut err = null_mut();
    // SAFETY: every pointer is live or null, which is what is being tested.
    unsafe {
        let wo = leveldb_writeoptions_create();
        let ro = leveldb_readoptions_create();
        leveldb_put(null_mut(), wo, c"k".as_ptr(), 1, c"v".as_ptr(), 1, &mut err);
        assert!(take(&mut err).is_some_and(|e| e.contains("database is NULL")));
        leveldb_put(db, wo, null(), 5, c"v".as_ptr(), 1, &mut err);
        assert!(take(&mut err).is_some_and(|e| e.starts_with("Invalid argument: key is NULL with length 5")));
        leveldb_put(db, null(), c"k".as_ptr(), 1, c"v".as_ptr(), 1, &mut err);
        assert!(take(&mut err).is_some());
        // A null key of length 0 is the empty key.
        leveldb_put(db, wo, null(), 0, c"empty".as_ptr(), 5, &mut err);
        assert_eq!(take(&mut err), None);
        let mut len = 99;
        let v = leveldb_get(db, ro, c"".as_ptr(), 0, &mut len, &mut err);
        assert!(!v.is_null() && len == 5);
        leveldb_free(v.cast());
        let v = leveldb_get(db, ro, c"absent".as_ptr(), 6, &mut len, &mut err);
        assert!(v.is_null() && len == 0 && err.is_null());
        assert!(leveldb_open(null(), c"/x".as_ptr(), &mut err).is_null());
        assert!(take(&mut err).is_some());
        leveldb_iter_seek_to_first(null_mut());
        assert_eq!(leveldb_iter_valid(null()), 0);
        assert!(leveldb_iter_key(null(), &mut len).is_null() && len == 0);
        leveldb_writebatch_put(null_mut(), c"k".as_ptr(), 1, null(), 3);
        leveldb_options_set_comparator(null_mut(), null_mut());
        assert!(leveldb_property_value(null_mut(), c"leveldb.stats".as_ptr()).is_null());
        assert!(leveldb_comparator_create(null_mut(), None, None, None).is_null());
        leveldb_compact_range(null_mut(), null(), 0, null(), 0);
        leveldb_readoptions_destroy(ro);
        leveldb_writeoptions_destroy(wo);
        leveldb_close(db);
    }
}

#[test]
fn an_error_replaces_the_previous_message_and_success_leaves_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut err = malloc_cstring("an earlier error");
    // SAFETY: live options; `err` holds a `malloc`ed message.
    unsafe {
        let o = leveldb_options_create();
        let missing = CString::new(dir.path().join("missing").to_str().expect("utf-8")).expect("no NUL");
        assert!(leveldb_open(o, missing.as_ptr(), &mut err).is_null());
        let msg = take(&mut err).expect("an error");
        assert!(msg.starts_with("Invalid argument: ") && msg.contains("create_if_missing"), "{msg}");
        err = malloc_cstring("kept");
        leveldb_destroy_db(o, missing.as_ptr(), &mut err);
        assert_eq!(take(&mut err).as_deref(), Some("kept"), "success leaves *errptr alone");
        leveldb_options_destroy(o);
    }
}

#[test]
fn a_panic_comes_back_as_an_error() {
    let mut err = null_mut();
    // SAFETY: `err` is a valid errptr.
    let got = unsafe { with_errptr(&mut err, 7, || -> CResult<i32> { panic!("boom") }) };
    assert_eq!(got, 7);
    assert!(take(&mut err).is_some_and(|e| e.contains("panicked: boom")));
    assert_eq!(quietly(3, || -> i32 { panic!("quiet") }), 3);
}

#[test]
fn one_database_serves_several_threads_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path()) as usize;
    std::thread::scope(|s| {
        for t in 0..4 {
            s.spawn(move || {
                let db = db as *mut leveldb_t;
                let mut err = null_mut();
                // SAFETY: the database is live until every thread is done; each thread has
                // its own options and buffers.
                unsafe {
                    let (wo, ro) = (leveldb_writeoptions_create(), leveldb_readoptions_create());
                    for i in 0..2000 {
                        let k = format!("t{t}-{i}");
                        leveldb_put(db, wo, k.as_ptr().cast(), k.len(), k.as_ptr().cast(), k.len(), &mut err);
                        assert_eq!(take(&mut err), None);
                        let mut len = 0;
                        let v = leveldb_get(db, ro, k.as_ptr().cast(), k.len(), &mut len, &mut err);
                        assert!(!v.is_null() && std::slice::from_raw_parts(v.cast::<u8>(), len) == k.as_bytes());
                        leveldb_free(v.cast());
                    }
                    leveldb_writeoptions_destroy(wo);
                    leveldb_readoptions_destroy(ro);
                }
            });
        }
    });
    // SAFETY: every thread is done with it.
    unsafe {
        let ro = leveldb_readoptions_create();
        let it = leveldb_create_iterator(db as *mut leveldb_t, ro);
        let mut n = 0;
        leveldb_iter_seek_to_first(it);
        while leveldb_iter_valid(it) != 0 {
            n += 1;
            leveldb_iter_next(it);
        }
        assert_eq!(n, 8000);
        leveldb_iter_destroy(it);
        leveldb_readoptions_destroy(ro);
        leveldb_close(db as *mut leveldb_t);
    }
}
