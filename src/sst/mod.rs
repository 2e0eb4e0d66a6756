//! Sorted string tables: immutable files of sorted internal-key entries (format in
//! `docs/format/sst.md`), their builder and reader.

pub mod block;
pub mod block_builder;
pub mod block_cache;
pub mod cascade;
pub mod compression;
pub mod dtable;
pub mod fences;
pub mod filter;
pub mod format;
pub mod table_builder;
pub mod table_cache;
pub mod table_reader;
pub mod verified;

pub use table_builder::{TableBuilder, TableOptions};
pub use table_reader::{BlockReads, Table, TableIterator, TableReadOptions};
