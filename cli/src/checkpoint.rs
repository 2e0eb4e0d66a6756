//! `checkpoint`, `backup` and `restore`: copies of a database, taken while it may be open in
//! another process. The database is opened read-only (it changes nothing in it; a writer
//! elsewhere goes on), so the copy holds it as that open saw it.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use wisckey::{Db, Options};

use crate::bench::CliResult;

#[derive(Args)]
pub struct CheckpointArgs {
    /// Database directory.
    #[arg(long)]
    pub db: PathBuf,
    /// The checkpoint's directory: new or empty (on the database's filesystem, files are
    /// hard-linked; elsewhere they are copied).
    #[arg(long)]
    pub to: PathBuf,
}

#[derive(Args)]
pub struct BackupArgs {
    /// Database directory.
    #[arg(long)]
    pub db: PathBuf,
    /// The backup directory (created if missing): every backup taken into it shares the files
    /// earlier ones copied.
    #[arg(long)]
    pub to: PathBuf,
}

#[derive(Args)]
pub struct RestoreArgs {
    /// The backup directory.
    #[arg(long)]
    pub from: PathBuf,
    /// The directory to restore into: new or empty.
    #[arg(long, required_unless_present = "list")]
    pub to: Option<PathBuf>,
    /// Which backup (default: the newest).
    #[arg(long)]
    pub backup: Option<u64>,
    /// List the backups instead of restoring one.
    #[arg(long)]
    pub list: bool,
}

fn open_source(db: &PathBuf) -> CliResult<Db> {
    Ok(Db::open_read_only(db, Options::default())?)
}

pub fn checkpoint(a: CheckpointArgs) -> CliResult {
    let db = open_source(&a.db)?;
    let start = Instant::now();
    let info = db.checkpoint(&a.to)?;
    let took = start.elapsed();
    db.close()?;
    println!(
        "checkpoint of {:?} at sequence {} in {:?}: {} files linked, {} copied ({} bytes) in {:.3} s",
        a.db,
        info.sequence,
        a.to,
        info.files_linked,
        info.files_copied,
        info.bytes_copied,
        took.as_secs_f64()
    );
    Ok(())
}

pub fn backup(a: BackupArgs) -> CliResult {
    let db = open_source(&a.db)?;
    let start = Instant::now();
    let info = db.backup(&a.to)?;
    let took = start.elapsed();
    db.close()?;
    println!(
        "backup {} of {:?} at sequence {} in {:?}: {} files ({} bytes), {} copied ({} bytes), the rest already there; {:.3} s",
        info.id,
        a.db,
        info.sequence,
        a.to,
        info.files,
        info.bytes,
        info.files_copied,
        info.bytes_copied,
        took.as_secs_f64()
    );
    Ok(())
}

pub fn restore(a: RestoreArgs) -> CliResult {
    let options = Options::default();
    if a.list {
        for b in wisckey::list_backups(&a.from, &options)? {
            println!(
                "backup {}: sequence {}, {} files, {} bytes, created {} (unix)",
                b.id, b.sequence, b.files, b.bytes, b.created_unix_secs
            );
        }
        return Ok(());
    }
    let to = a.to.ok_or("--to is required")?;
    let start = Instant::now();
    let info = wisckey::restore_backup(&a.from, a.backup, &to, &options)?;
    println!(
        "restored backup {} (sequence {}, {} files, {} bytes) into {:?} in {:.3} s",
        info.id,
        info.sequence,
        info.files,
        info.bytes,
        to,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
