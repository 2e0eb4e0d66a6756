//! A reader for Java `.properties` files, the format of YCSB's workload files: `key=value`,
//! `key: value` or `key value`, `#`/`!` comments, and lines continued with a trailing `\`.

use std::collections::BTreeMap;

/// Parse `text` into key → value (a later line wins, as in `java.util.Properties`).
pub fn parse(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut logical = String::new();
    for raw in text.lines() {
        let line = raw.trim_start();
        if logical.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with('!')) {
            continue;
        }
        // An odd number of trailing backslashes continues the line.
        let trailing = line.len() - line.trim_end_matches('\\').len();
        if trailing % 2 == 1 {
            logical.push_str(&line[..line.len() - 1]);
            continue;
        }
        logical.push_str(line);
        if let Some((k, v)) = split_entry(&logical) {
            out.insert(k, v);
        }
        logical.clear();
    }
    if let Some((k, v)) = split_entry(&logical) {
        out.insert(k, v);
    }
    out
}

/// The key ends at the first unescaped `=`, `:` or whitespace; the separator and the
/// whitespace around it are dropped.
fn split_entry(line: &str) -> Option<(String, String)> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    let mut key = String::new();
    let mut chars = line.char_indices().peekable();
    let mut rest = "";
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, e)) = chars.next() {
                    key.push(unescape(e));
                }
            }
            '=' | ':' => {
                rest = &line[i + 1..];
                break;
            }
            c if c.is_whitespace() => {
                rest = line[i..].trim_start();
                // `key = value`: one `=` or `:` may follow the whitespace.
                rest = rest.strip_prefix(['=', ':']).unwrap_or(rest);
                break;
            }
            c => key.push(c),
        }
    }
    Some((key, unescape_value(rest.trim_start())))
}

fn unescape(c: char) -> char {
    match c {
        't' => '\t',
        'n' => '\n',
        'r' => '\r',
        'f' => '\x0c',
        c => c,
    }
}

fn unescape_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(e) = chars.next() {
                out.push(unescape(e));
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ycsb_workload_files() {
        let text = "# Yahoo! Cloud System Benchmark\n\
                    ! another comment\n\
                    recordcount=1000\n\
                    operationcount = 2000\n\
                    workload=site.ycsb.workloads.CoreWorkload\n\
                    \n\
                    readproportion: 0.95\n\
                    requestdistribution zipfian\n\
                    maxscanlength=1\\\n    00\n\
                    empty=\n\
                    recordcount=3000\n";
        let p = parse(text);
        assert_eq!(p["recordcount"], "3000");
        assert_eq!(p["operationcount"], "2000");
        assert_eq!(p["workload"], "site.ycsb.workloads.CoreWorkload");
        assert_eq!(p["readproportion"], "0.95");
        assert_eq!(p["requestdistribution"], "zipfian");
        assert_eq!(p["maxscanlength"], "100");
        assert_eq!(p["empty"], "");
        assert_eq!(p.len(), 7);
    }

    #[test]
    fn escapes_in_keys_and_values() {
        let p = parse("a\\=b=c\\td\nkey\\ with\\ space = v\n");
        assert_eq!(p["a=b"], "c\td");
        assert_eq!(p["key with space"], "v");
    }
}
