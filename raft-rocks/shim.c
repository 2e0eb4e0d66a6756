/* The `rocksdb` crate 0.25 is written against RocksDB 8+ and references
   rocksdb_write_buffer_manager_destroy from the drop of a write buffer manager, which this
   crate never makes. Debian's librocksdb 7.8 lacks the function, so a binary linked against
   it fails to link without a definition. This one is weak: a librocksdb that has the real
   function wins, and with 7.8 the no-op is never called. build.rs links it only when
   ROCKSDB_LIB_DIR selects a prebuilt library. */
__attribute__((weak)) void rocksdb_write_buffer_manager_destroy(void *wbm) { (void)wbm; }
