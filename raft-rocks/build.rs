//! Links shim.c's no-op `rocksdb_write_buffer_manager_destroy` into this package's binaries
//! and tests when `ROCKSDB_LIB_DIR` points at a prebuilt librocksdb (Debian's 7.8 lacks that
//! RocksDB 8 function, which the `rocksdb` crate references). Without `ROCKSDB_LIB_DIR`,
//! librocksdb-sys builds RocksDB from source, which has it, and nothing is added.
fn main() {
    println!("cargo:rerun-if-changed=shim.c");
    println!("cargo:rerun-if-env-changed=ROCKSDB_LIB_DIR");
    if std::env::var_os("ROCKSDB_LIB_DIR").is_none() {
        return;
    }
    // An object file on the link line (not a static library) so that the linker keeps it
    // whatever the order of the crates that reference the symbol.
    let objects = cc::Build::new().file("shim.c").compile_intermediates();
    for object in objects {
        println!("cargo:rustc-link-arg={}", object.display());
    }
}
