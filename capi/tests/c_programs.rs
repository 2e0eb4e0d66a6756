//! C programs against the installed header and this crate's shared library, compiled with the
//! system's C compiler (`cc`, or `$CC`) and run: LevelDB 1.23's own `db/c_test.c`, unmodified;
//! our reverse-comparator and filter-policy test; and a check that every function `c.h`
//! declares links. `WISCKEY_SKIP_C_TESTS=1` skips them where no C compiler exists (CI has one).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory holding `libwisckey_c.so` built for this test run (the test binary's own).
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps directory").to_path_buf();
    [deps.clone(), deps.parent().map(Path::to_path_buf).unwrap_or_default()]
        .into_iter()
        .find(|d| d.join("libwisckey_c.so").exists())
        .unwrap_or_else(|| panic!("libwisckey_c.so not found next to {exe:?}"))
}

fn skip() -> bool {
    let skip = std::env::var("WISCKEY_SKIP_C_TESTS").is_ok_and(|v| v == "1");
    if skip {
        eprintln!("WISCKEY_SKIP_C_TESTS=1: C programs not compiled");
    }
    skip
}

/// Compile `source` into `out` against the header and the shared library.
fn compile(source: &Path, out: &Path) {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let lib = library_dir();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let status = Command::new(&cc)
        .args(["-std=c99", "-D_DEFAULT_SOURCE", "-Wall", "-Werror", "-Wno-unused-parameter"])
        .arg("-I")
        .arg(&include)
        .arg(source)
        .arg("-o")
        .arg(out)
        .arg(format!("-L{}", lib.display()))
        .arg("-lwisckey_c")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc:?} (set WISCKEY_SKIP_C_TESTS=1 without one): {e}"));
    assert!(status.success(), "{cc} failed on {source:?}");
}

/// Run `program` with `args` and LevelDB's test directory in a fresh place; it must pass.
fn run(program: &Path, args: &[&Path], test_dir: &Path) {
    let out = Command::new(program).args(args).env("TEST_TMPDIR", test_dir).output().expect("run the C program");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.contains("PASS"), "{program:?} failed ({}):\n{stderr}", out.status);
}

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(name)
}

#[test]
fn leveldb_c_test_passes_unmodified() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("c_test");
    compile(&source("c_test.c"), &bin);
    run(&bin, &[], dir.path());
}

#[test]
fn a_reverse_comparator_and_a_filter_policy_from_c_and_a_refused_reopen() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("comparator_test");
    compile(&source("comparator_test.c"), &bin);
    run(&bin, &[dir.path()], dir.path());
}

#[test]
fn every_function_the_header_declares_links() {
    if skip() {
        return;
    }
    let header =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/leveldb/c.h")).expect("read c.h");
    let mut names: Vec<&str> = header
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("leveldb_") && !w.ends_with("_t"))
        .filter(|w| !["leveldb_no_compression", "leveldb_snappy_compression"].contains(w))
        .collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 68, "LevelDB 1.23's c.h declares 68 functions: {names:?}");
    let refs: String = names.iter().map(|n| format!("  (void (*)(void)){n},\n")).collect();
    let program = format!(
        "#include \"leveldb/c.h\"\n#include <stdio.h>\nvoid (*fns[])(void) = {{\n{refs}}};\n\
         int main(void) {{ for (unsigned i = 0; i < sizeof fns / sizeof fns[0]; i++) if (!fns[i]) return 1;\n\
         fprintf(stderr, \"PASS\\n\"); return 0; }}\n"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("all.c");
    std::fs::write(&src, program).expect("write");
    let bin = dir.path().join("all");
    compile(&src, &bin);
    run(&bin, &[], dir.path());
}
