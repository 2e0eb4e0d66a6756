//! The `wisckey` command end to end: a database built with `put` and `compact` reads back with
//! `get`, `verify` exits 0 for it and 1 once a byte of a live separated value is flipped,
//! naming the damaged value-log file; damage amid synced log groups fails `verify` (the database
//! does not open) and `repair` salvages it with a report of what was lost.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Longer than the default `min_separated_value_bytes` (1 KiB): kept in the value log.
fn marker_value() -> String {
    format!("MARKER-{}-MARKER", "0123456789".repeat(200))
}

fn wisckey(args: &[&str], db: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wisckey"))
        .arg(args[0])
        .arg("--db")
        .arg(db)
        .args(&args[1..])
        .output()
        .expect("run wisckey")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn succeeds(args: &[&str], db: &Path) -> String {
    let out = wisckey(args, db);
    assert!(out.status.success(), "wisckey {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    stdout(&out)
}

/// Flip a byte inside the marker's value in the value-log file holding it.
fn damage_marker_value(dir: &Path) -> PathBuf {
    let marker = marker_value();
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "vlog") {
            continue;
        }
        let mut bytes = std::fs::read(&path).expect("read");
        if let Some(at) = bytes.windows(marker.len()).position(|w| w == marker.as_bytes()) {
            bytes[at + 10] ^= 0x5a;
            std::fs::write(&path, bytes).expect("write");
            return path;
        }
    }
    panic!("the marker value is in no value-log file");
}

#[test]
fn verify_exits_zero_for_a_healthy_database_and_one_for_a_damaged_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = tmp.path().join("db");
    let marker = marker_value();
    succeeds(&["put", "small", "v"], &db);
    succeeds(&["put", "marker", &marker], &db);
    // Flushed and compacted: the marker's pointer is in a table, its value before the log head.
    succeeds(&["compact"], &db);
    assert_eq!(succeeds(&["get", "marker"], &db).trim_end(), marker);
    let ok = succeeds(&["verify"], &db);
    assert!(ok.contains("healthy"), "{ok}");

    let vlog = damage_marker_value(&db);
    let bad = wisckey(&["verify"], &db);
    let text = stdout(&bad);
    assert_eq!(bad.status.code(), Some(1), "stdout: {text}");
    let name = vlog.file_name().expect("name").to_string_lossy().into_owned();
    assert!(text.contains(&name) && text.contains("DAMAGED"), "{text}");
    assert!(!wisckey(&["get", "marker"], &db).status.success(), "a damaged value is never returned");
}

/// Flip one byte of a file.
fn flip_byte(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[at] ^= 0x5a;
    std::fs::write(path, bytes).expect("write");
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

#[test]
fn verify_fails_on_damage_before_synced_log_groups_and_repair_salvages_with_a_report() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let db_dir = tmp.path().join("db");
    // Many synced groups in the log past its head (nothing flushed).
    let options = || wisckey::Options::default().write_buffer_bytes(8 << 20).min_separated_value_bytes(64);
    let db = wisckey::Db::open(&db_dir, options()).expect("open");
    for i in 0..300u32 {
        let value = format!("{i}-{}", "w".repeat(150));
        db.put_opt(&wisckey::WriteOptions::synced(), key(i), value.as_bytes()).expect("put");
    }
    db.close().expect("close");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&db_dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "vlog"))
        .collect();
    logs.sort();
    let log = logs.pop().expect("a log file");
    let len = std::fs::metadata(&log).expect("stat").len() as usize;
    flip_byte(&log, len / 2);

    let out = wisckey(&["verify"], &db_dir);
    let (text, err) = (stdout(&out), String::from_utf8_lossy(&out.stderr).into_owned());
    assert_eq!(out.status.code(), Some(1), "verify must fail: {text} {err}");
    assert!(text.contains("DAMAGED") && err.contains("at stake"), "{text} {err}");
    let name = log.file_name().expect("name").to_string_lossy().into_owned();
    assert!(err.contains(&name), "the error names the log file: {err}");

    let report = succeeds(&["repair"], &db_dir);
    assert!(report.contains("sequence numbers") && report.contains("key"), "the report names what is lost: {report}");
    assert!(db_dir.join("lost").is_dir(), "evidence kept in lost/");

    let ok = succeeds(&["verify"], &db_dir);
    assert!(ok.contains("healthy"), "verify after repair: {ok}");
    // Every key but the one or two in the damaged group reads back.
    let db = wisckey::Db::open(&db_dir, options()).expect("open after repair");
    let present = (0..300u32).filter(|&i| db.get(key(i)).expect("get").is_some()).count();
    assert!((297..300).contains(&present), "{present} of 300 keys kept");
}

/// The number after `label` in a bench result line (`reads:123`).
fn count(line: &str, label: &str) -> u64 {
    let at = line.find(label).unwrap_or_else(|| panic!("{label} in {line}")) + label.len();
    line[at..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().expect("a count")
}

/// `bench` with the merge-policy flags: a tiered load, then the read/write mix, whose reads and
/// writes add up to `--reads` and follow `--readwritepercent`; `stats` reports the filters.
#[test]
fn bench_runs_a_read_write_mix_on_a_tiered_tree() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let out = succeeds(
        &[
            "bench",
            "--num=20000",
            "--reads=10000",
            "--value_size=100",
            "--merge_policy=tiering:3",
            "--filter_allocation=monkey",
            "--readwritepercent=70",
            "--benchmarks=fillrandom,readrandomwriterandom,stats",
        ],
        &db,
    );
    let line = out.lines().find(|l| l.starts_with("readrandomwriterandom")).expect("the mix ran");
    let (reads, writes) = (count(line, "reads:"), count(line, "writes:"));
    assert_eq!(reads + writes, 10_000, "{line}");
    assert!((6_000..8_000).contains(&reads), "about 70 % reads: {line}");
    assert!(out.contains("filters:"), "stats report the filters: {out}");
    assert!(out.contains("compacted_into:"), "stats report compaction bytes per level: {out}");
}

/// The phases of a shifting workload run one after another on one database with the tuner
/// on: each phase's mix is as named (the read phase draws half its reads from absent keys),
/// each reports its rate after its first fifth, and `stats` names the design in force.
#[test]
fn bench_runs_a_shifting_workload_with_the_tuner_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let out = succeeds(
        &[
            "bench",
            "--num=20000",
            "--reads=10000",
            "--value_size=100",
            "--auto_tune",
            "--auto_tune_interval_ms=50",
            "--benchmarks=fillshuffle,shiftwrites,shiftreads,shiftscans,stats",
        ],
        &db,
    );
    let phase = |name: &str| out.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}: {out}"));
    let (w, r, s) = (phase("shiftwrites"), phase("shiftreads"), phase("shiftscans"));
    assert!((8_500..9_500).contains(&count(w, "writes:")), "90 % writes: {w}");
    assert!((8_500..9_500).contains(&count(r, "reads:")), "90 % reads: {r}");
    let (reads, found) = (count(r, "reads:"), count(r, "found:"));
    assert!(found * 10 > reads * 4 && found * 10 < reads * 6, "about half the reads find their key: {r}");
    assert!((3_500..4_500).contains(&count(s, "reads:")), "40 % scans: {s}");
    assert!([w, r, s].iter().all(|l| count(l, "after_20%:") > 0), "{out}");
    assert!(out.contains("merge_policy:"), "{out}");
}

/// `tune` on a database: a bush-shaped load (fillshuffle, with probes) records its mix in the
/// WORKLOAD file at close; `tune --db` reads it back (all writes and absent-key lookups here)
/// and chooses knobs no dearer than any preset, printing the presets beside them.
#[test]
fn tune_reads_a_databases_recorded_mix_and_prints_a_choice_beside_the_presets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let bench = succeeds(
        &[
            "bench",
            "--num=20000",
            "--value_size=100",
            "--merge_policy=bush",
            "--probe_every=5000",
            "--benchmarks=fillshuffle,stats",
        ],
        &db,
    );
    assert!(bench.contains("probed per lookup"), "{bench}");
    let out = succeeds(&["tune"], &db);
    let mix = out.lines().next().expect("the workload line");
    assert!(
        mix.contains("reads 0.00") && mix.contains("writes 0.98"),
        "20000 writes, 400 lookups of absent keys: {mix}"
    );
    let chosen = out.lines().find(|l| l.starts_with("chosen: wacky:")).expect("a chosen configuration");
    assert!(chosen.contains("--merge_policy=wacky:T="), "{chosen}");
    let cost = |l: &str| l.split_whitespace().last().and_then(|c| c.parse::<f64>().ok()).expect("a cost");
    let best = cost(out.lines().find(|l| l.starts_with("* ")).expect("the chosen row"));
    let presets: Vec<f64> = ["leveling ", "tiering ", "lazy-leveling", "scll", "bush "]
        .iter()
        .map(|p| cost(out.lines().find(|l| l.trim_start().starts_with(p)).unwrap_or_else(|| panic!("{p} row: {out}"))))
        .collect();
    assert!(presets.iter().all(|&c| best <= c), "{out}");
}

/// `--probe_every` reports the filter memory the tables held at the probes (what makes
/// Monkey's and uniform's false positives comparable, `scripts/monkey-bench.sh`).
#[test]
fn probes_during_a_fill_report_the_filter_bits_per_entry_the_tables_held() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = [
        "bench",
        "--num=20000",
        "--value_size=100",
        "--write_buffer_size=131072",
        "--bloom_bits=5",
        "--filter_allocation=uniform",
        "--probe_every=5000",
        "--benchmarks=fillrandom",
    ];
    let out = succeeds(&args, &dir.path().join("db"));
    let line = out.lines().find(|l| l.starts_with("fillrandom")).expect("the fill's line");
    let bits = line.split("probes: ").nth(1).and_then(|s| s.split_whitespace().next()).and_then(|b| b.parse().ok());
    let bits: f64 = bits.unwrap_or_else(|| panic!("no filter bits in {line}"));
    assert!((4.9..5.6).contains(&bits), "5 bits per key, whole 64-byte lines: {line}");
}

/// The read-heavy mix of `scripts/tune-bench.sh`: the search's optimum (lazy leveling at T = 8)
/// is predicted within 3 % of the lazy-leveling preset, closer than the model can rank, so
/// `tune` answers with the preset and prints the optimum beside it; `--preset_margin=0`
/// answers with the optimum.
#[test]
fn tune_answers_with_a_preset_the_model_cannot_tell_from_its_optimum() {
    let tune = |margin: &str| {
        let args =
            ["tune", "--writes=0.1", "--reads=0.45", "--zero_reads=0.45", "--num=2000000", "--bloom_bits=5", margin];
        let out = Command::new(env!("CARGO_BIN_EXE_wisckey")).args(args).output().expect("run");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let chosen = |out: &str| out.lines().find(|l| l.starts_with("chosen: ")).expect("a chosen line").to_string();
    let near = tune("--preset_margin=0.03");
    assert!(chosen(&near).contains("(lazy-leveling)") && chosen(&near).contains("T=10,"), "{near}");
    let optimum = near.lines().find(|l| l.starts_with("o ")).expect("the optimum's row");
    assert!(near.contains("too close for the model to rank"), "{near}");
    let exact = tune("--preset_margin=0");
    assert!(chosen(&exact).contains("T=8,"), "{exact}");
    assert!(!exact.lines().any(|l| l.starts_with("o ")), "the optimum is the answer: {exact}");
    let knobs = |l: &str| l.split_whitespace().nth(2).map(str::to_string);
    let exact_row = exact.lines().find(|l| l.starts_with("* ")).expect("the chosen row");
    assert_eq!(knobs(optimum), knobs(exact_row), "{near}\n{exact}");
}

#[test]
fn tune_refuses_a_mix_of_nothing() {
    let out = Command::new(env!("CARGO_BIN_EXE_wisckey")).args(["tune", "--num=1000"]).output().expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--writes"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `checkpoint`, `backup` and `restore` on a database another handle has open for writing (the
/// commands open it read-only beside it), and a checkpoint into a non-empty directory refused.
#[test]
fn checkpoint_backup_and_restore_work_beside_an_open_writer() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (db_dir, copy, backups, restored) =
        (tmp.path().join("db"), tmp.path().join("copy"), tmp.path().join("backups"), tmp.path().join("restored"));
    let db = wisckey::Db::open(&db_dir, wisckey::Options::default()).expect("open");
    let marker = marker_value();
    db.put(b"marker", marker.as_bytes()).and_then(|_| db.flush()).expect("put and flush");
    // Synced: a read-only open in another process sees what reached the files (an unsynced
    // write may still be in the writer's buffer).
    db.put_opt(&wisckey::WriteOptions::synced(), b"unflushed", b"in the log only").expect("put");
    let out = succeeds(&["checkpoint", "--to", copy.to_str().expect("utf-8")], &db_dir);
    assert!(out.contains("files linked"), "{out}");
    db.put_opt(&wisckey::WriteOptions::synced(), b"marker", b"overwritten after the checkpoint").expect("overwrite");
    assert_eq!(succeeds(&["get", "marker"], &copy).trim_end(), marker);
    assert_eq!(succeeds(&["get", "unflushed"], &copy).trim_end(), "in the log only");
    assert!(succeeds(&["verify"], &copy).contains("healthy"));
    let refused = wisckey(&["checkpoint", "--to", copy.to_str().expect("utf-8")], &db_dir);
    let err = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success() && err.contains("not empty"), "{err}");

    let first = succeeds(&["backup", "--to", backups.to_str().expect("utf-8")], &db_dir);
    let second = succeeds(&["backup", "--to", backups.to_str().expect("utf-8")], &db_dir);
    assert!(first.starts_with("backup 1") && second.starts_with("backup 2"), "{first}{second}");
    drop(db);
    let restore = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_wisckey")).arg("restore").args(args).output().expect("run");
        assert!(out.status.success(), "restore {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        stdout(&out)
    };
    let list = restore(&["--from", backups.to_str().expect("utf-8"), "--list"]);
    assert_eq!(list.lines().count(), 2, "{list}");
    restore(&["--from", backups.to_str().expect("utf-8"), "--to", restored.to_str().expect("utf-8")]);
    assert_eq!(succeeds(&["get", "marker"], &restored).trim_end(), "overwritten after the checkpoint");
    assert!(succeeds(&["verify"], &restored).contains("healthy"));
}

/// The admin commands open a database with the shaping options it recorded: `compact` on a
/// tiered database keeps it tiered (it used to open with default options and reshape the tree
/// into leveling), `stats` reports the recorded policy, and only an open that names another
/// policy changes it.
#[test]
fn compact_and_stats_keep_a_tiered_database_tiered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    succeeds(&["bench", "--num=20000", "--value_size=100", "--merge_policy=tiering:3", "--benchmarks=fillrandom"], &db);
    let tiering: wisckey::MergePolicy = "tiering:3".parse().expect("tiering:3");
    let wisckey::MergePolicy::Wacky(knobs) = tiering else { panic!("tiering is a Wacky policy") };
    let expected = format!("merge_policy:     {knobs}");
    let compacted = succeeds(&["compact"], &db);
    assert!(compacted.contains(&expected), "compact kept the policy: {compacted}");
    let stats = succeeds(&["stats"], &db);
    assert!(stats.contains(&expected), "stats reads the recorded policy: {stats}");
    let json = succeeds(&["stats", "--json"], &db);
    assert!(json.contains(&format!("\"merge_policy\":\"{knobs}\"")), "{json}");
    let reopened = wisckey::Db::open(&db, wisckey::Options::default().create_if_missing(false)).expect("open");
    assert_eq!(reopened.stats().merge_policy, knobs.to_string(), "the library's default open too");
    drop(reopened);
    let named = wisckey::Db::open(&db, wisckey::Options::default().merge_policy(wisckey::MergePolicy::Leveling))
        .expect("open naming leveling");
    assert_eq!(named.stats().merge_policy, "leveling", "a named policy reshapes");
    drop(named);
    let stats = succeeds(&["stats"], &db);
    assert!(stats.contains("merge_policy:     leveling"), "and is recorded from then on: {stats}");
}

/// `tune --db` answers per keyspace, each for its own recorded mix: a keyspace that only takes
/// writes and one that only answers lookups of absent keys get different designs.
#[test]
fn tune_answers_for_each_keyspace_from_its_own_recorded_mix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    {
        let db = wisckey::Db::open(&path, wisckey::Options::default()).expect("open");
        let writes = db.create_keyspace("writes", wisckey::Options::default()).expect("create");
        let lookups = db.create_keyspace("lookups", wisckey::Options::default()).expect("create");
        for i in 0..20_000u32 {
            writes.put(format!("w{i:08}"), [7u8; 100]).expect("put");
            lookups.put(format!("l{i:08}"), [7u8; 100]).expect("put");
        }
        db.flush().expect("flush");
        for i in 0..200_000u32 {
            assert!(lookups.get(format!("absent{i}")).expect("get").is_none());
        }
        db.close().expect("close");
    }
    let out = succeeds(&["tune"], &path);
    let chosen = |ks: &str| -> String {
        let at = out.find(&format!("keyspace {ks}:")).unwrap_or_else(|| panic!("no answer for {ks}: {out}"));
        let line = out[at..].lines().find(|l| l.starts_with("chosen: ")).expect("a chosen line");
        line.to_string()
    };
    assert_ne!(chosen("writes"), chosen("lookups"), "{out}");
    let one = succeeds(&["tune", "--keyspace", "writes"], &path);
    assert!(one.lines().next().is_some_and(|l| l.starts_with("workload: reads 0.00")), "{one}");
    let missing = wisckey(&["tune", "--keyspace", "nope"], &path);
    assert!(!missing.status.success());
}
