//! Fuzz target: arbitrary bytes as an encoded `VersionEdit` (a manifest record payload).
//! Decoding must never panic, and whatever decodes must re-encode and decode to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wisckey::internals::VersionEdit;

fuzz_target!(|data: &[u8]| {
    if let Ok(edit) = VersionEdit::decode(data) {
        let again = VersionEdit::decode(&edit.encoded()).expect("a decoded edit must re-decode");
        assert_eq!(again, edit, "edit changed across encode/decode");
    }
});
