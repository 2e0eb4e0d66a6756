//! `wisckey dump` end to end, on the files of a live database built here (separated and inline
//! values, deletions, flushes, a compaction, value-log GC with a cold file; a second database
//! under light-weight compaction for a DTable): every file kind dumps with its real content —
//! keys, sequence numbers, kinds, counts, and value pointers that lead to the log op holding the
//! value — and each kind damaged (a byte flipped, the file cut, an empty file, a file of another
//! kind) fails with exit status 1 and an error naming the file and the offset, never a panic,
//! after dumping what is still readable.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use wisckey::{Db, Options, WriteOptions};

fn dump(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wisckey")).arg("dump").args(args).output().expect("run wisckey dump")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `wisckey dump ARGS` succeeds; its stdout.
fn ok(args: &[&str]) -> String {
    let out = dump(args);
    assert!(out.status.success(), "dump {args:?} failed: {}\n{}", text(&out.stderr), text(&out.stdout));
    text(&out.stdout)
}

/// `wisckey dump ARGS` fails with status 1 (not a panic); its stdout and stderr.
fn fails(args: &[&str]) -> (String, String) {
    let out = dump(args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "dump {args:?} must fail: {stderr}\n{stdout}");
    assert!(!stderr.contains("panicked"), "dump {args:?} panicked: {stderr}");
    (stdout, stderr)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// Even keys get 200-byte values (separated: the tree points into the log), odd ones 10 bytes
/// (inline in the tree).
fn value(i: u32, round: u32) -> Vec<u8> {
    let len = if i.is_multiple_of(2) { 200 } else { 10 };
    format!("{round}:{i}:{}", "v".repeat(len)).into_bytes()[..len].to_vec()
}

fn options() -> Options {
    Options::default()
        .min_separated_value_bytes(64)
        .write_buffer_bytes(16 << 10)
        .block_size_bytes(1024)
        .log_file_bytes(24 << 10)
        .compaction_threads(1)
        .gc_interval_ms(0)
        .gc_chunk_bytes(16 << 10)
        .gc_pause_ms(0)
}

const KEYS: u32 = 400;

/// A database with every file kind: tables at level 1 after a compaction, several log files,
/// a cold file from GC, a manifest with additions, removals and value-log statistics. Returns
/// the live keys with their newest values (`None`: deleted).
fn build(dir: &Path) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
    let mut model = BTreeMap::new();
    let db = Db::open(dir, options()).expect("open");
    // Key i's first write has sequence number i + 1.
    for i in 0..KEYS {
        db.put(key(i), value(i, 0)).expect("put");
        model.insert(key(i), Some(value(i, 0)));
    }
    for round in 1..3 {
        for i in (0..KEYS / 2).filter(|i| i % 4 == 0) {
            db.put(key(i), value(i, round)).expect("overwrite");
            model.insert(key(i), Some(value(i, round)));
        }
    }
    for i in (0..KEYS).filter(|i| i % 10 == 7) {
        db.delete(key(i)).expect("delete");
        model.insert(key(i), None);
    }
    db.flush().expect("flush");
    db.compact_range(None, None).expect("compact");
    let gc = db.run_gc(0.0).expect("gc");
    assert!(gc.files_collected > 0 && gc.bytes_rewritten > 0, "{gc:?}");
    db.put_opt(&WriteOptions::synced(), b"synced", b"after gc").expect("synced put");
    model.insert(b"synced".to_vec(), Some(b"after gc".to_vec()));
    db.close().expect("close");
    model
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

/// `(user key, seq, kind, rest)` of the entry lines of a table dump (`--keys`).
fn entry_lines(out: &str) -> Vec<(String, u64, String, String)> {
    out.lines()
        .filter(|l| l.starts_with("    ") && l.contains(" @"))
        .map(|l| {
            let mut w = l.split_whitespace();
            let key = w.next().expect("key").to_string();
            let seq = w.next().and_then(|s| s.strip_prefix('@')).and_then(|s| s.parse().ok()).expect("seq");
            let kind = w.next().expect("kind").to_string();
            (key, seq, kind, w.collect::<Vec<_>>().join(" "))
        })
        .collect()
}

/// The number after `label` in `line`.
fn number_after(line: &str, label: &str) -> u64 {
    let at = line.find(label).unwrap_or_else(|| panic!("{label:?} in {line}")) + label.len();
    line[at..].trim_start().chars().take_while(char::is_ascii_digit).collect::<String>().parse().expect("a number")
}

/// The tables' newest versions are exactly the live keys, every version once, with sequence
/// numbers and kinds; each pointer leads to the log op holding the key and value; the
/// manifest lists every edit, the logs their groups and marks, the cold file GC's copies, and
/// the shape every table of the manifest beside the model.
#[test]
fn dump_shows_the_real_content_of_every_file_kind_of_a_live_database() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    let model = build(&dir);
    let tables = files(&dir, "sst");
    assert!(!tables.is_empty());

    // Tables: every version once; the newest version of each key is its last write (GC's
    // pointer puts, flushed at close, are newer versions of the separated keys).
    let mut newest: BTreeMap<String, (u64, String, String)> = BTreeMap::new();
    let mut versions = BTreeSet::new();
    for t in &tables {
        let out = ok(&["table", s(t), "--keys", "--blocks"]);
        assert!(out.contains("a plain table (1 segment)") && out.contains("crc ok"), "{out}");
        let entries = entry_lines(&out);
        let summary = out.lines().find(|l| l.trim_start().starts_with("entries:")).expect("entries line");
        assert_eq!(number_after(summary, "entries:"), entries.len() as u64, "{out}");
        let props = out.lines().find(|l| l.trim_start().starts_with("properties:")).expect("properties");
        assert_eq!(number_after(props, "properties:"), entries.len() as u64, "{out}");
        assert!(out.contains("filter:     bloom") && out.contains("bits/key"), "{out}");
        for (k, seq, kind, rest) in entries {
            assert!(seq >= 1 && versions.insert((k.clone(), seq)), "{k} @{seq} twice");
            match kind.as_str() {
                "ptr" => assert!(rest.starts_with("-> "), "{k}: {rest}"),
                "put" => assert!(rest.starts_with("inline "), "{k}: {kind} {rest}"),
                _ => assert_eq!(kind, "del", "{k}"),
            }
            if newest.get(&k).is_none_or(|(s, _, _)| *s < seq) {
                newest.insert(k, (seq, kind, rest));
            }
        }
    }
    let seen: BTreeMap<String, (u64, String)> = newest
        .iter()
        .filter(|(_, (_, kind, _))| kind != "del")
        .map(|(k, (s, kind, _))| (k.clone(), (*s, kind.clone())))
        .collect();
    // The newest versions' pointers (older ones may name files GC has collected since).
    let pointers: Vec<(String, String)> = newest
        .iter()
        .filter(|(_, (_, kind, _))| kind == "ptr")
        .map(|(k, (_, _, rest))| (k.clone(), rest[3..].split_whitespace().next().expect("f:o:l").to_string()))
        .collect();
    // The last write (after GC) is only in the log, which the next open replays.
    let live: BTreeSet<String> = model
        .iter()
        .filter(|(k, v)| v.is_some() && k.as_slice() != b"synced")
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert_eq!(seen.keys().cloned().collect::<BTreeSet<_>>(), live, "the tables' newest versions are the live keys");
    assert!(seen.iter().filter(|(k, _)| k.ends_with(['1', '3', '5', '9'])).all(|(_, (_, kind))| kind == "put"));
    // Never overwritten, never moved by GC with a new pointer put: an odd key keeps its first
    // sequence number, i + 1.
    assert_eq!(seen.get("key00001"), Some(&(2, "put".to_string())), "key00001 was the second write");
    assert!(pointers.len() >= 100, "even keys are separated: {}", pointers.len());

    // Each pointer leads to an op of its key in the log or cold file it names.
    let mut dumped: BTreeMap<u64, String> = BTreeMap::new();
    for (k, target) in pointers.iter().step_by(7) {
        let parts: Vec<u64> = target.split(':').map(|p| p.parse().expect("number")).collect();
        let (file, offset, len) = (parts[0], parts[1], parts[2]);
        let out = dumped.entry(file).or_insert_with(|| {
            let path = [dir.join(format!("{file:06}.vlog")), dir.join(format!("{file:06}.cold"))]
                .into_iter()
                .find(|p| p.exists())
                .unwrap_or_else(|| panic!("pointer of {k} into missing file {file}"));
            ok(&["log", s(&path), "--records"])
        });
        let op = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("@{offset} ")))
            .unwrap_or_else(|| panic!("no op at {offset} of file {file} for {k}"));
        assert!(op.contains(&format!(" put {k} value 200 B, separated")), "{op}");
        assert_eq!(len, 1 + 1 + 2 + 8 + 200, "op length: kind, two varints, key, value");
    }

    // The log files: each starts with its start mark; the newest holds the last write and the
    // clean close's sync mark; GC's pointer puts name the cold file.
    let logs = files(&dir, "vlog");
    let cold = files(&dir, "cold");
    assert!(!cold.is_empty(), "GC made a cold file");
    // The separation threshold comes from the database's manifest (64 B here, not the default).
    let dumps: Vec<String> = logs.iter().map(|l| ok(&["log", s(l), "--records"])).collect();
    for out in &dumps {
        assert!(out.contains("values of at least 64 B are separated (the database's recorded setting)"), "{out}");
        let first = out.lines().nth(2).expect("a record");
        assert!(first.starts_with("@0 ") && first.contains("start mark: next seq"), "{out}");
        let summary = out.lines().last().expect("summary");
        let groups = out.lines().filter(|l| l.starts_with('@') && l.contains(" group seq ")).count() as u64;
        assert_eq!(number_after(summary, "summary:"), groups, "{out}");
    }
    let newest = dumps.last().expect("a log");
    assert!(newest.contains("sync mark: durable to"), "{newest}");
    assert!(newest.contains("put synced value 8 B, inline \"after gc\""), "{newest}");
    let cold_number = cold[0].file_stem().and_then(|n| n.to_str()).and_then(|n| n.parse::<u64>().ok()).expect("n");
    let moved = dumps.iter().flat_map(|d| d.lines()).filter(|l| l.contains("moved by value-log GC"));
    let into_cold = moved.filter(|l| l.contains(&format!("-> {cold_number}:"))).count();
    assert!(into_cold > 0, "GC's pointer puts name the cold file {cold_number}: {dumps:?}");

    let cold_out = ok(&["log", s(&cold[0]), "--records"]);
    assert!(cold_out.starts_with("cold value file"), "{cold_out}");
    let copies = cold_out.lines().filter(|l| l.contains(" put key") && l.ends_with("value 200 B, separated")).count();
    assert!(copies > 0, "GC copied live values: {cold_out}");
    assert!(cold_out.contains("all separated"), "{cold_out}");

    // The manifest: the snapshot first, then every edit with its fields.
    let manifest = ok(&["manifest", "--db", s(&dir)]);
    let fields = [
        "comparator: wisckey.bytewise",
        "policy: leveled(T=10)",
        "min_separated_value_bytes=64",
        "log_head: file",
        "add L",
        "vlog_added",
    ];
    for field in fields {
        assert!(manifest.contains(field), "{field}: {manifest}");
    }
    let records = manifest.lines().filter(|l| l.starts_with("record ")).count() as u64;
    assert!(records >= 1, "{manifest}");
    let summary = manifest.lines().last().expect("summary");
    assert_eq!(number_after(summary, "summary:"), records, "{summary}");

    // The shape: every table, with the model beside the levels.
    let shape = ok(&["shape", "--db", s(&dir)]);
    assert!(shape.contains("policy leveled(T=10)") && shape.contains("model: wacky:T=10,K=0,Z=0"), "{shape}");
    assert!(shape.contains("recorded options: ") && shape.contains("block_size_bytes=1024"), "{shape}");
    for t in &tables {
        let name = t.file_name().expect("name").to_string_lossy().into_owned();
        assert!(shape.contains(&name), "{name} in {shape}");
    }
    assert!(shape.lines().any(|l| l.starts_with("L1 ")), "{shape}");
    let json = ok(&["shape", "--db", s(&dir), "--json"]);
    assert!(json.lines().all(|l| l.starts_with('{') && l.ends_with('}')), "{json}");
}

/// Light-weight compaction appends segments to tables: `dump table` shows the DTable's tail
/// and each segment with its own properties, filter and index, and `dump manifest` its segment
/// count.
#[test]
fn dump_shows_the_segments_of_a_dtable() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("lwc");
    let opts = Options::default()
        .light_weight_compaction(true)
        .compaction_threads(1)
        .write_buffer_bytes(4 << 10)
        .target_file_size_bytes(8 << 10)
        .block_size_bytes(512)
        .max_bytes_for_level_base(32 << 10)
        .l0_compaction_trigger(2)
        .gc_interval_ms(0);
    let db = Db::open(&dir, opts).expect("open");
    // Write until the settled tree holds a table of several segments: later compactions may
    // merge the first appended tables away, and which ones survive depends on how the
    // background work interleaved with the writes (a fixed count of writes left none, once).
    let holds_dtable =
        |st: &wisckey::DbStats| st.level_segments.iter().zip(&st.level_files).any(|(&s, &f)| s > f as u64);
    let mut i = 0u32;
    for _round in 0..40 {
        for _ in 0..1000 {
            let k = key((i * 7919) % 500);
            db.put(&k, format!("{i}-{}", "x".repeat(40)).as_bytes()).expect("put");
            i += 1;
        }
        db.flush().expect("flush");
        db.wait_for_background_work().expect("settle");
        if holds_dtable(&db.stats()) {
            break;
        }
    }
    let st = db.stats();
    assert!(st.num_segments_appended > 0 && holds_dtable(&st), "{st:?}");
    db.close().expect("close");

    let mut dtables = 0;
    for t in files(&dir, "sst") {
        let out = ok(&["table", s(&t), "--keys"]);
        let Some(head) = out.lines().find(|l| l.contains("a DTable of")) else { continue };
        dtables += 1;
        let n = number_after(head, "a DTable of");
        assert!(n >= 2, "{head}");
        assert!(out.contains("  tail: directory at"), "{out}");
        for i in 0..n {
            assert!(out.contains(&format!("segment {i}: bytes")), "segment {i}: {out}");
        }
        assert_eq!(out.matches("  properties:").count() as u64, n, "{out}");
        assert_eq!(out.matches("  filter:     bloom").count() as u64, n, "{out}");
        // Each segment lists its own entries, in order within the segment.
        let total: u64 =
            out.lines().filter(|l| l.trim_start().starts_with("entries:")).map(|l| number_after(l, "entries:")).sum();
        assert_eq!(total, entry_lines(&out).len() as u64, "{out}");
    }
    assert!(dtables > 0, "a table with appended segments");
    let manifest = ok(&["manifest", "--db", s(&dir)]);
    assert!(manifest.contains("segments (DTable)"), "{manifest}");
}

/// A copy of `path` in `dir` changed by `f` (the original is left as it is).
fn damaged_copy(dir: &Path, path: &Path, f: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    let mut bytes = std::fs::read(path).expect("read");
    f(&mut bytes);
    let copy = dir.join(path.file_name().expect("name"));
    std::fs::write(&copy, bytes).expect("write");
    copy
}

/// The largest file of the directory with extension `ext`.
fn largest(dir: &Path, ext: &str) -> PathBuf {
    files(dir, ext).into_iter().max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)).expect("a file")
}

/// The manifest `CURRENT` names.
fn current_manifest(dir: &Path) -> PathBuf {
    dir.join(std::fs::read_to_string(dir.join("CURRENT")).expect("CURRENT").trim())
}

/// The `@OFFSET` of each top-level line of `out` that contains `what`.
fn offsets_of(out: &str, what: &str) -> Vec<u64> {
    out.lines()
        .filter(|l| l.starts_with('@') && l.contains(what))
        .map(|l| l[1..].split_whitespace().next().and_then(|o| o.parse().ok()).expect("offset"))
        .collect()
}

/// The error names the file and the offset.
fn names(stderr: &str, path: &Path, offset: u64) {
    let name = path.file_name().expect("name").to_string_lossy().into_owned();
    assert!(stderr.contains(&name) && stderr.contains(&format!("at offset {offset}:")), "{name} @{offset}: {stderr}");
}

/// A flipped byte in each kind of file: the dump reads on past the damage (the other blocks,
/// the next intact manifest record, the log's next valid group) and fails naming the offset.
/// Zeroed records in a log (a punched hole) are shown as such and are not damage.
#[test]
fn a_flipped_byte_is_reported_at_its_offset_after_dumping_what_is_readable() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    build(&dir);
    let bad = tmp.path().join("bad");
    std::fs::create_dir(&bad).expect("mkdir");

    // A table: damage in its second data block.
    let table = largest(&dir, "sst");
    let blocks = ok(&["table", s(&table), "--blocks"]);
    let starts: Vec<u64> =
        blocks.lines().filter(|l| l.trim_start().starts_with("block ")).map(|l| number_after(l, "@")).collect();
    assert!(starts.len() >= 3, "{blocks}");
    let copy = damaged_copy(&bad, &table, |b| b[starts[1] as usize + 7] ^= 0x20);
    let (out, err) = fails(&["table", s(&copy), "--blocks"]);
    names(&err, &copy, starts[1]);
    assert!(err.contains("checksum mismatch"), "{err}");
    assert_eq!(out.matches("crc ok").count(), starts.len() - 1, "every other block reads: {out}");

    // The manifest: damage in its second record; the first and the rest still dump.
    let manifest = current_manifest(&dir);
    let good = ok(&["manifest", s(&manifest)]);
    let records: Vec<u64> = good.lines().filter(|l| l.starts_with("record ")).map(|l| number_after(l, "@")).collect();
    assert!(records.len() >= 3, "{good}");
    let copy = damaged_copy(&bad, &manifest, |b| b[records[1] as usize + 9] ^= 0x01);
    let (out, err) = fails(&["manifest", s(&copy)]);
    names(&err, &copy, records[1]);
    assert!(err.contains(&format!("the next intact record is at offset {}", records[2])), "{err}");
    let kept = out.lines().filter(|l| l.starts_with("record ")).count();
    assert_eq!(kept, records.len() - 1, "all but the damaged record: {out}");

    // A log file: damage inside one group; the groups after it are found again.
    for ext in ["vlog", "cold"] {
        let log = largest(&dir, ext);
        let good = ok(&["log", s(&log)]);
        let groups = offsets_of(&good, "group seq");
        assert!(groups.len() >= 3, "{good}");
        let copy = damaged_copy(&bad, &log, |b| b[groups[1] as usize + 30] ^= 0x08);
        let (out, err) = fails(&["log", s(&copy)]);
        names(&err, &copy, groups[1]);
        assert!(err.contains(&format!("valid records resume at offset {}", groups[2])), "{err}");
        assert_eq!(offsets_of(&out, "group seq").len(), groups.len() - 1, "{out}");
    }

    // Whole records zeroed, as value-log GC's hole punching leaves them, are not damage.
    let log = largest(&dir, "vlog");
    let groups = offsets_of(&ok(&["log", s(&log)]), "group seq");
    let copy = damaged_copy(&bad, &log, |b| b[groups[0] as usize..groups[2] as usize].fill(0));
    let out = ok(&["log", s(&copy)]);
    let hole = groups[2] - groups[0];
    assert!(out.contains(&format!("@{:<10} {hole} zero bytes", groups[0])), "{out}");
    assert_eq!(offsets_of(&out, "group seq"), groups[2..], "{out}");
}

/// A file cut short, an empty file and a file of another kind: a clear error at the offset,
/// status 1, no panic.
#[test]
fn a_cut_an_empty_or_a_wrong_kind_of_file_is_refused_with_the_offset() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    build(&dir);
    let bad = tmp.path().join("bad");
    std::fs::create_dir(&bad).expect("mkdir");
    let table = files(&dir, "sst").remove(0);
    let log = largest(&dir, "vlog");
    let manifest = current_manifest(&dir);

    let len = std::fs::metadata(&table).expect("stat").len();
    let cut = damaged_copy(&bad, &table, |b| b.truncate(len as usize / 2));
    let (_, err) = fails(&["table", s(&cut)]);
    names(&err, &cut, len / 2 - 8);
    assert!(err.contains("cut short"), "{err}");

    let good = ok(&["manifest", s(&manifest)]);
    let last =
        good.lines().filter(|l| l.starts_with("record ")).map(|l| number_after(l, "@")).next_back().expect("a record");
    let mlen = std::fs::metadata(&manifest).expect("stat").len();
    let cut = damaged_copy(&bad, &manifest, |b| b.truncate((last + mlen) as usize / 2));
    let (out, err) = fails(&["manifest", s(&cut)]);
    names(&err, &cut, last);
    assert!(err.contains("torn tail"), "{err}");
    assert!(out.contains("record 0 @0"), "the records before the cut: {out}");

    let good = ok(&["log", s(&log)]);
    let groups = offsets_of(&good, "group seq");
    let cut = damaged_copy(&bad, &log, |b| b.truncate(groups[groups.len() / 2] as usize + 25));
    let (out, err) = fails(&["log", s(&cut)]);
    names(&err, &cut, groups[groups.len() / 2]);
    assert!(err.contains("no valid record after it"), "{err}");
    assert_eq!(offsets_of(&out, "group seq"), groups[..groups.len() / 2], "the groups before the cut: {out}");

    for (kind, file) in [("table", &table), ("manifest", &manifest), ("log", &log)] {
        let empty = damaged_copy(&bad, file, Vec::clear);
        let (_, err) = fails(&[kind, s(&empty)]);
        names(&err, &empty, 0);
        assert!(err.contains("empty"), "{err}");
    }

    let (_, err) = fails(&["table", s(&log)]);
    assert!(err.contains("not a wisckey table") && err.contains("try `wisckey dump log`"), "{err}");
    let (_, err) = fails(&["manifest", s(&table)]);
    names(&err, &table, 0);
    assert!(err.contains("try `wisckey dump table`"), "{err}");
    let (_, err) = fails(&["log", s(&manifest)]);
    names(&err, &manifest, 0);
    assert!(err.contains("try `wisckey dump manifest`"), "{err}");
}

/// Every line of `out` is a JSON object with a `type`; the objects of each type.
fn json_lines(out: &str) -> BTreeMap<String, Vec<serde_json::Value>> {
    let mut by_type: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for line in out.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let t = v["type"].as_str().unwrap_or_else(|| panic!("no type: {line}")).to_string();
        by_type.entry(t).or_default().push(v);
    }
    by_type
}

/// `--json` prints one JSON object per line, with the same content as the text.
#[test]
fn json_dumps_are_one_object_per_line_with_the_same_content() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    build(&dir);

    let table = largest(&dir, "sst");
    let j = json_lines(&ok(&["table", s(&table), "--keys", "--blocks", "--json"]));
    let entries = entry_lines(&ok(&["table", s(&table), "--keys"]));
    assert_eq!(j["entry"].len(), entries.len());
    for (e, (k, seq, kind, _)) in j["entry"].iter().zip(&entries) {
        assert_eq!(
            (e["key"].as_str(), e["seq"].as_u64(), e["kind"].as_str()),
            (Some(&k[..]), Some(*seq), Some(&kind[..]))
        );
    }
    let segment = &j["segment"][0];
    assert_eq!(segment["num_entries"].as_u64(), Some(entries.len() as u64));
    assert_eq!(j["block"].len() as u64, segment["index_entries"].as_u64().expect("index entries"));
    assert_eq!(j["table"][0]["segments"].as_u64(), Some(1));

    let j = json_lines(&ok(&["manifest", "--db", s(&dir), "--json"]));
    let records = &j["record"];
    assert_eq!(records[0]["comparator"].as_str(), Some("wisckey.bytewise"));
    let added: usize = records.iter().map(|r| r["added_tables"].as_array().expect("list").len()).sum();
    assert!(added >= 1 && records.iter().all(|r| r["offset"].is_u64()), "{records:?}");

    let log = largest(&dir, "vlog");
    let j = json_lines(&ok(&["log", s(&log), "--records", "--json", "--min-separated-value-bytes", "64"]));
    let ops: u64 = j["group"].iter().map(|g| g["count"].as_u64().expect("count")).sum();
    assert_eq!(j["op"].len() as u64, ops);
    assert_eq!(j["start_mark"].len(), 1);
    let first = j["group"][0]["first_seq"].as_u64().expect("seq");
    assert_eq!(j["op"][0]["seq"].as_u64(), Some(first));

    let j = json_lines(&ok(&["shape", "--db", s(&dir), "--json"]));
    let tables: u64 = j["level"].iter().map(|l| l["tables"].as_u64().expect("tables")).sum();
    assert_eq!(tables, files(&dir, "sst").len() as u64);
    assert!(j["model"][0]["knobs"].as_str().is_some_and(|k| k.starts_with("wacky:T=10")), "{:?}", j["model"]);
}

/// A reader that stops reading (`wisckey dump ... | head`) ends the dump quietly, not with a
/// panic on the broken pipe.
#[test]
fn a_reader_that_goes_away_ends_the_dump_quietly() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    build(&dir);
    let mut child = Command::new(env!("CARGO_BIN_EXE_wisckey"))
        .args(["dump", "log", "--records", s(&largest(&dir, "vlog"))])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("panicked"), "{}", text(&out.stderr));
}

/// Under a tiered policy a level holds several runs: `dump shape` lists each with its tables,
/// and the policy's targets beside them (T = 3: up to two runs per level).
#[test]
fn dump_shape_shows_the_runs_of_a_tiered_tree_beside_the_policys_targets() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("tiered");
    let opts = Options::default()
        .merge_policy(wisckey::MergePolicy::tiering(3))
        .compaction_threads(1)
        .write_buffer_bytes(8 << 10)
        .gc_interval_ms(0);
    let db = Db::open(&dir, opts).expect("open");
    for i in 0..4000u32 {
        db.put(key((i * 7919) % 3000), format!("{i}-{}", "t".repeat(60)).as_bytes()).expect("put");
    }
    db.flush().expect("flush");
    db.wait_for_background_work().expect("settle");
    let runs: Vec<usize> = db.stats().level_runs;
    db.close().expect("close");
    assert!(runs.iter().any(|&r| r >= 2), "a level of several runs: {runs:?}");

    let out = ok(&["shape", "--db", s(&dir), "--write-buffer-bytes", "8192"]);
    assert!(out.contains("policy wacky:T=3,K=1,Z=1,C=2,X=1"), "{out}");
    for (level, &n) in runs.iter().enumerate().filter(|(_, &n)| n > 0) {
        let row =
            out.lines().find(|l| l.starts_with(&format!("L{level} "))).unwrap_or_else(|| panic!("L{level}: {out}"));
        assert_eq!(row.split_whitespace().nth(1).and_then(|r| r.parse().ok()), Some(n), "{row}");
        assert!(row.contains(", 2 runs"), "tiering at T = 3 keeps up to two runs: {row}");
    }
    let listed = out.lines().filter(|l| l.trim_start().starts_with("run ")).count();
    assert_eq!(listed, runs.iter().sum::<usize>(), "{out}");
    assert!(out.contains("model: wacky:T=3,K=1,Z=1,C=2,X=1"), "{out}");
}
