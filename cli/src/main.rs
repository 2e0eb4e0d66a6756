//! The `wisckey` command line: `bench` (LevelDB db_bench-compatible), `ycsb` (YCSB A–F against
//! wisckey or peer engines), small admin commands on an existing database (stats, compact,
//! get, put, scan, destroy, checkpoint, backup, restore) and `dump`, which shows what a
//! database's files hold.

mod admin;
mod bench;
mod checkpoint;
mod dump;
mod repair;
mod serve;
mod stress;
mod tune;
mod txnbench;
mod verify;
mod ycsb;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "wisckey", version, about = "wisckey key-value store: benchmark and admin tool")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run db_bench-style benchmarks (flags spelled like LevelDB's db_bench).
    Bench(Box<bench::BenchArgs>),
    /// Print the database's counters and shape.
    Stats(admin::StatsArgs),
    /// Compact the whole key range down the tree.
    Compact(admin::DbArg),
    /// Print the value of KEY.
    Get(admin::GetArgs),
    /// Set KEY to VALUE (creates the database if missing).
    Put(admin::PutArgs),
    /// Print `key<TAB>value` lines in key order.
    Scan(admin::ScanArgs),
    /// Delete the database's files.
    Destroy(admin::DbArg),
    /// Make DIR an openable copy of the database (hard links where it can), while a writer
    /// elsewhere may go on.
    Checkpoint(checkpoint::CheckpointArgs),
    /// Add a backup of the database to BACKUPDIR (files earlier backups hold are not copied
    /// again).
    Backup(checkpoint::BackupArgs),
    /// Restore a backup from BACKUPDIR into a new or empty directory (or list the backups).
    Restore(checkpoint::RestoreArgs),
    /// Run value-log garbage collection now.
    Gc(admin::GcArgs),
    /// Check every checksum and value pointer; exit 1 if the database is damaged.
    Verify(verify::VerifyArgs),
    /// Look inside a table, manifest or log file, or a database's shape (read-only).
    Dump(dump::DumpArgs),
    /// Salvage a database whose log is damaged and report what was lost.
    Repair(repair::RepairArgs),
    /// Run one node of the replicated key-value server (openraft over HTTP/JSON).
    Serve(Box<wisckey_raft::server::ServeArgs>),
    /// db_stress-like random workload checked against an expected-state file (crash testing).
    Stress(stress::StressArgs),
    /// Choose merge-policy knobs for a workload with the Wacky cost model (and compare presets).
    Tune(tune::TuneArgs),
    /// Optimistic read-modify-write transactions at a set conflict rate, against wisckey or
    /// RocksDB's OptimisticTransactionDB (feature `peers`).
    Txnbench(txnbench::TxnBenchArgs),
    /// YCSB core workloads A–F (or a YCSB property file) against wisckey or a peer engine.
    Ycsb(ycsb::YcsbArgs),
    /// SVG charts of ratios from scripts/compare.sh's summary JSON (feature `plot`).
    #[cfg(feature = "plot")]
    Plot(ycsb::plot::PlotArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and --version go to stdout with success; usage errors exit 1.
            let _ = e.print();
            return if e.use_stderr() { ExitCode::FAILURE } else { ExitCode::SUCCESS };
        }
    };
    init_logging();
    let result = match cli.command {
        Command::Bench(a) => bench::run(*a),
        Command::Stats(a) => admin::stats(a),
        Command::Compact(a) => admin::compact(a),
        Command::Get(a) => admin::get(a),
        Command::Put(a) => admin::put(a),
        Command::Scan(a) => admin::scan(a),
        Command::Destroy(a) => admin::destroy(a),
        Command::Checkpoint(a) => checkpoint::checkpoint(a),
        Command::Backup(a) => checkpoint::backup(a),
        Command::Restore(a) => checkpoint::restore(a),
        Command::Gc(a) => admin::gc(a),
        Command::Verify(a) => verify::run(a),
        Command::Dump(a) => dump::run(a),
        Command::Repair(a) => repair::run(a),
        Command::Serve(a) => serve::run(*a),
        Command::Stress(a) => stress::run(a),
        Command::Tune(a) => tune::run(a),
        Command::Txnbench(a) => txnbench::run(a),
        Command::Ycsb(a) => ycsb::run(a),
        #[cfg(feature = "plot")]
        Command::Plot(a) => ycsb::plot::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wisckey: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Engine logs (tracing) on stderr; `RUST_LOG` selects, warnings and errors by default.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
