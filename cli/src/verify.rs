//! `wisckey verify --db DIR`: check every checksum and every live value pointer of a database
//! and print what is broken and where; exits 1 when the database is damaged.

use clap::Args;
use wisckey::{Db, Options};

use crate::admin::DbArg;
use crate::bench::CliResult;

#[derive(Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub db: DbArg,
}

pub fn run(a: VerifyArgs) -> CliResult {
    // A database too damaged to open fails here, with the reason (for damaged log bytes that
    // had been synced: the file, offset and sequence numbers at stake).
    let db = match Db::open(&a.db.db, Options::default().create_if_missing(false)) {
        Ok(db) => db,
        Err(e) => {
            println!("result: DAMAGED (the database does not open)");
            return Err(e.into());
        }
    };
    let report = db.verify()?;
    db.close()?;
    print!("{report}");
    if report.is_healthy() {
        Ok(())
    } else {
        let n = report.errors.len() as u64 + report.errors_omitted;
        Err(format!("database {:?} is damaged: {n} errors", a.db.db).into())
    }
}
