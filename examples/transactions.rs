//! Optimistic transactions: read at a snapshot with your own writes visible, write in any
//! keyspaces, and commit all of it atomically — or get `Error::Conflict` (nothing written)
//! when another commit got there first, and run the transaction again. Serializable
//! transactions also refuse write skew.
//!
//! `cargo run --example transactions`

use wisckey::{Db, Error, Options, TransactionOptions};

/// Move `amount` from one account to another in a serializable transaction, retrying on a
/// conflict. `false` when the balance is too low.
fn transfer(db: &Db, from: &str, to: &str, amount: u64) -> wisckey::Result<bool> {
    let accounts = db.keyspace("accounts")?;
    let ledger = db.keyspace("ledger")?;
    loop {
        let mut txn = db.transaction_with(TransactionOptions::default().serializable().synced());
        let balance = |v: Option<wisckey::Value>| v.map_or(0, |v| u64::from_le_bytes(v[..8].try_into().unwrap()));
        let got = txn.multi_get(&accounts, &[from, to])?;
        let (a, b) = (balance(got[0].clone()), balance(got[1].clone()));
        if a < amount {
            return Ok(false); // dropped without commit: rolled back
        }
        txn.put(&accounts, from, (a - amount).to_le_bytes())?;
        txn.put(&accounts, to, (b + amount).to_le_bytes())?;
        // The ledger entry is in another keyspace, in the same atomic commit.
        let n = txn.prefix(&ledger, "tx:")?.count();
        txn.put(&ledger, format!("tx:{n:06}"), format!("{from} -> {to}: {amount}"))?;
        match txn.commit() {
            Ok(()) => return Ok(true),
            Err(e) if e.is_retryable() => continue,
            Err(e) => return Err(e),
        }
    }
}

fn main() -> wisckey::Result<()> {
    let dir = std::env::temp_dir().join(format!("wisckey-example-transactions-{}", std::process::id()));
    let db = Db::open(&dir, Options::default())?;
    let accounts = db.create_keyspace("accounts", Options::default())?;
    db.create_keyspace("ledger", Options::default())?;
    accounts.put("alice", 100u64.to_le_bytes())?;
    accounts.put("bob", 50u64.to_le_bytes())?;

    assert!(transfer(&db, "alice", "bob", 30)?);
    assert!(!transfer(&db, "bob", "alice", 500)?, "not enough money: nothing written");
    let ledger: Vec<String> = db
        .keyspace("ledger")?
        .prefix("tx:")?
        .map(|r| r.map(|(_, v)| String::from_utf8_lossy(&v).into_owned()))
        .collect::<Result<_, _>>()?;
    assert_eq!(ledger, ["alice -> bob: 30"]);

    // A conflict: another writer changes a key this transaction writes after its snapshot.
    let mut txn = db.transaction();
    txn.put(&accounts, "alice", 0u64.to_le_bytes())?;
    accounts.put("alice", 1u64.to_le_bytes())?;
    match txn.commit() {
        Err(Error::Conflict { keyspace, key, .. }) => {
            println!("conflict on {keyspace}/{}: retry", String::from_utf8_lossy(&key));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(accounts.get("alice")?.as_deref(), Some(&1u64.to_le_bytes()[..]), "the other writer's value stays");

    // Write skew: two doctors on call each go off call if the other is on. Snapshot
    // isolation lets both commit; serializable refuses the second.
    for opts in [TransactionOptions::default(), TransactionOptions::default().serializable()] {
        accounts.put("doc:a", "on")?;
        accounts.put("doc:b", "on")?;
        let (mut t1, mut t2) = (db.transaction_with(opts.clone()), db.transaction_with(opts.clone()));
        for (t, me) in [(&mut t1, "doc:a"), (&mut t2, "doc:b")] {
            let on =
                t.multi_get(&accounts, &["doc:a", "doc:b"])?.iter().filter(|v| v.as_deref() == Some(b"on")).count();
            if on == 2 {
                t.put(&accounts, me, "off")?;
            }
        }
        t1.commit()?;
        let second = t2.commit();
        println!("{:?}: second doctor's commit: {:?}", opts.isolation, second.as_ref().map_err(|e| e.to_string()));
        assert_eq!(second.is_err(), opts.isolation == wisckey::Isolation::Serializable);
    }

    db.close()?;
    wisckey::destroy(&dir, &Options::default())?;
    Ok(())
}
