//! `wisckey repair --db DIR`: open a database whose log is damaged with a salvage recovery mode,
//! keep every write that can be kept, and print what was lost (sequence numbers and keys);
//! copies of the affected log files and the full report stay in `DIR/lost/`.

use clap::Args;
use wisckey::{Db, Options, RecoveryMode};

use crate::admin::DbArg;
use crate::bench::CliResult;

#[derive(Args)]
pub struct RepairArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Keep only the log up to the first damage (a consistent point in time) instead of every
    /// valid record group after it too.
    #[arg(long)]
    pub point_in_time: bool,
}

pub fn run(a: RepairArgs) -> CliResult {
    let mode = if a.point_in_time { RecoveryMode::PointInTime } else { RecoveryMode::SkipDamaged };
    let db = Db::open(&a.db.db, Options::default().create_if_missing(false).recovery_mode(mode))?;
    match db.recovery_report() {
        Some(report) => {
            print!("{report}");
            if let Some(f) = &report.report_file {
                println!("full report: {f:?}");
            }
        }
        None => println!("the log is intact (a torn tail, if any, was dropped as on every open): nothing to repair"),
    }
    db.close()?;
    Ok(())
}
