//! `wisckey-raft-rocks serve`: one node of the replicated key-value server on the RocksDB
//! stores, for comparison with `wisckey serve`: the same flags, the same server
//! (`wisckey_raft::server::serve`), the same API; only the storage under openraft differs.

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use wisckey_raft::server::{serve, ServeArgs};

#[derive(Parser)]
#[command(name = "wisckey-raft-rocks", about = "The replicated key-value server on openraft's RocksDB store")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one node (the flags of `wisckey serve`).
    Serve(ServeArgs),
}

fn run(a: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let config = a.config()?;
    let (log, sm) = wisckey_raft_rocks::open(&a.dir)?;
    let reader = Arc::new(sm.clone());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    eprintln!("wisckey-raft-rocks serve: node {} listening on {}", config.id, config.listen);
    rt.block_on(serve(config, log, sm, reader))?;
    Ok(())
}

fn main() -> ExitCode {
    let Command::Serve(args) = Cli::parse().command;
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wisckey-raft-rocks: {e}");
            ExitCode::FAILURE
        }
    }
}
