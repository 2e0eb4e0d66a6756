//! `wisckey serve`: one node of the replicated key-value server (openraft on a wisckey
//! database in `--dir`; the HTTP API is described in `wisckey_raft::server`).

use std::sync::Arc;

use wisckey::Options;
use wisckey_raft::server::{serve, ServeArgs};

use crate::bench::CliResult;

pub fn run(a: ServeArgs) -> CliResult {
    let config = a.config()?;
    let (log, sm) = wisckey_raft::open(&a.dir, Options::default())?;
    let reader = Arc::new(sm.clone());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    eprintln!("wisckey serve: node {} listening on {}", config.id, config.listen);
    rt.block_on(serve(config, log, sm, reader))?;
    Ok(())
}
