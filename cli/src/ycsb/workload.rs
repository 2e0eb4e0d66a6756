//! What a YCSB workload is: CoreWorkload's properties (counts, operation mix, request and scan
//! length distributions, value size) read from a property file, and the built-in A–F, which are
//! YCSB's own `workloads/workload[a-f]` files embedded verbatim.

use std::collections::BTreeMap;

use super::properties;

/// The five CoreWorkload operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
}

impl Op {
    /// YCSB's report names.
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "READ",
            Op::Update => "UPDATE",
            Op::Insert => "INSERT",
            Op::Scan => "SCAN",
            Op::ReadModifyWrite => "READ-MODIFY-WRITE",
        }
    }
}

/// `requestdistribution` (the ones CoreWorkload's A–F use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestDistribution {
    Uniform,
    Zipfian,
    Latest,
}

/// `scanlengthdistribution`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanLengthDistribution {
    Uniform,
    Zipfian,
}

/// One workload's parameters, with CoreWorkload's defaults for anything the file leaves out.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub name: String,
    pub record_count: u64,
    pub operation_count: u64,
    /// Operation mix: (proportion, operation), zero proportions included.
    pub mix: Vec<(f64, Op)>,
    pub request_distribution: RequestDistribution,
    pub min_scan_length: u64,
    pub max_scan_length: u64,
    pub scan_length_distribution: ScanLengthDistribution,
    /// `fieldcount * fieldlength`: the whole record is one value here.
    pub value_size: usize,
    /// `insertorder=hashed` (the default) spreads keys with FNV; `ordered` keeps them in order.
    pub hashed_inserts: bool,
}

/// YCSB's `workloads/workloada` … `workloadf`, without their comment blocks.
const PRESETS: [(&str, &str); 6] = [
    (
        "a",
        "recordcount=1000\noperationcount=1000\nworkload=site.ycsb.workloads.CoreWorkload\nreadallfields=true\n\
         readproportion=0.5\nupdateproportion=0.5\nscanproportion=0\ninsertproportion=0\nrequestdistribution=zipfian\n",
    ),
    (
        "b",
        "recordcount=1000\noperationcount=1000\nworkload=site.ycsb.workloads.CoreWorkload\nreadallfields=true\n\
         readproportion=0.95\nupdateproportion=0.05\nscanproportion=0\ninsertproportion=0\nrequestdistribution=zipfian\n",
    ),
    (
        "c",
        "recordcount=1000\noperationcount=1000\nworkload=site.ycsb.workloads.CoreWorkload\nreadallfields=true\n\
         readproportion=1\nupdateproportion=0\nscanproportion=0\ninsertproportion=0\nrequestdistribution=zipfian\n",
    ),
    (
        "d",
        "recordcount=1000\noperationcount=1000\nworkload=site.ycsb.workloads.CoreWorkload\nreadallfields=true\n\
         readproportion=0.95\nupdateproportion=0\nscanproportion=0\ninsertproportion=0.05\nrequestdistribution=latest\n",
    ),
    (
        "e",
        "recordcount=1000\noperationcount=1000\nworkload=site.ycsb.workloads.CoreWorkload\nreadallfields=true\n\
         readproportion=0\nupdateproportion=0\nscanproportion=0.95\ninsertproportion=0.05\nrequestdistribution=zipfian\n\
         maxscanlength=100\nscanlengthdistribution=uniform\n",
    ),
    (
        "f",
        "recordcount=1000\noperationcount=1000\nworkload=site.ycsb.workloads.CoreWorkload\nreadallfields=true\n\
         readproportion=0.5\nupdateproportion=0\nscanproportion=0\ninsertproportion=0\n\
         readmodifywriteproportion=0.5\nrequestdistribution=zipfian\n",
    ),
];

impl Workload {
    /// Built-in workload `a` … `f` (case-insensitive).
    pub fn preset(name: &str) -> Result<Workload, String> {
        let lower = name.to_ascii_lowercase();
        let text = PRESETS
            .iter()
            .find(|(n, _)| *n == lower)
            .map(|(_, t)| *t)
            .ok_or_else(|| format!("unknown workload '{name}' (built in: a, b, c, d, e, f)"))?;
        Workload::from_properties(&lower, &properties::parse(text))
    }

    /// CoreWorkload's reading of the properties it supports; anything it would do differently
    /// from what we implement is an error rather than a silently different workload.
    pub fn from_properties(name: &str, p: &BTreeMap<String, String>) -> Result<Workload, String> {
        let num = |key: &str, default: f64| -> Result<f64, String> {
            p.get(key).map_or(Ok(default), |v| v.trim().parse().map_err(|_| format!("{key}={v:?} is not a number")))
        };
        let int = |key: &str, default: u64| -> Result<u64, String> {
            p.get(key).map_or(Ok(default), |v| v.trim().parse().map_err(|_| format!("{key}={v:?} is not a count")))
        };
        let text = |key: &str, default: &str| p.get(key).map_or(default.to_string(), |v| v.trim().to_string());
        let mix = vec![
            (num("readproportion", 0.95)?, Op::Read),
            (num("updateproportion", 0.05)?, Op::Update),
            (num("insertproportion", 0.0)?, Op::Insert),
            (num("scanproportion", 0.0)?, Op::Scan),
            (num("readmodifywriteproportion", 0.0)?, Op::ReadModifyWrite),
        ];
        if mix.iter().all(|(w, _)| *w <= 0.0) {
            return Err("every operation proportion is zero".into());
        }
        let request_distribution = match text("requestdistribution", "uniform").as_str() {
            "uniform" => RequestDistribution::Uniform,
            "zipfian" => RequestDistribution::Zipfian,
            "latest" => RequestDistribution::Latest,
            other => return Err(format!("requestdistribution={other} is not supported (uniform, zipfian, latest)")),
        };
        let scan_length_distribution = match text("scanlengthdistribution", "uniform").as_str() {
            "uniform" => ScanLengthDistribution::Uniform,
            "zipfian" => ScanLengthDistribution::Zipfian,
            other => return Err(format!("scanlengthdistribution={other} is not supported (uniform, zipfian)")),
        };
        if text("fieldlengthdistribution", "constant") != "constant" {
            return Err("only fieldlengthdistribution=constant is supported".into());
        }
        let hashed_inserts = match text("insertorder", "hashed").as_str() {
            "hashed" => true,
            "ordered" => false,
            other => return Err(format!("insertorder={other} is not supported (hashed, ordered)")),
        };
        let (min_scan_length, max_scan_length) = (int("minscanlength", 1)?, int("maxscanlength", 1000)?);
        if min_scan_length == 0 || min_scan_length > max_scan_length {
            return Err(format!("scan lengths {min_scan_length}..={max_scan_length} are not a range"));
        }
        let value_size = int("fieldcount", 10)?.saturating_mul(int("fieldlength", 100)?);
        Ok(Workload {
            name: name.to_string(),
            record_count: int("recordcount", 0)?,
            operation_count: int("operationcount", 0)?,
            mix,
            request_distribution,
            min_scan_length,
            max_scan_length,
            scan_length_distribution,
            value_size: usize::try_from(value_size).map_err(|_| "fieldcount * fieldlength is too large")?,
            hashed_inserts,
        })
    }

    pub fn proportion(&self, op: Op) -> f64 {
        self.mix.iter().find(|(_, o)| *o == op).map_or(0.0, |(w, _)| *w)
    }

    /// Records the zipfian key chooser spans: CoreWorkload predicts twice the expected inserts
    /// so popular keys stay popular as the key space grows.
    pub fn zipfian_span(&self) -> u64 {
        let expected_new = (self.operation_count as f64 * self.proportion(Op::Insert) * 2.0) as u64;
        self.record_count + expected_new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_ycsb_core_workloads() {
        let a = Workload::preset("A").unwrap();
        assert_eq!((a.proportion(Op::Read), a.proportion(Op::Update)), (0.5, 0.5));
        assert_eq!(a.request_distribution, RequestDistribution::Zipfian);
        assert_eq!((a.record_count, a.operation_count, a.value_size), (1000, 1000, 1000));
        let b = Workload::preset("b").unwrap();
        assert_eq!((b.proportion(Op::Read), b.proportion(Op::Update)), (0.95, 0.05));
        assert_eq!(Workload::preset("c").unwrap().proportion(Op::Read), 1.0);
        let d = Workload::preset("d").unwrap();
        assert_eq!((d.proportion(Op::Read), d.proportion(Op::Insert)), (0.95, 0.05));
        assert_eq!(d.request_distribution, RequestDistribution::Latest);
        let e = Workload::preset("e").unwrap();
        assert_eq!((e.proportion(Op::Scan), e.proportion(Op::Insert)), (0.95, 0.05));
        assert_eq!((e.min_scan_length, e.max_scan_length), (1, 100));
        assert_eq!(e.scan_length_distribution, ScanLengthDistribution::Uniform);
        assert_eq!(e.zipfian_span(), 1000 + 100);
        let f = Workload::preset("f").unwrap();
        assert_eq!((f.proportion(Op::Read), f.proportion(Op::ReadModifyWrite)), (0.5, 0.5));
        assert!(f.hashed_inserts);
        assert!(Workload::preset("g").is_err());
    }

    #[test]
    fn preset_mixes_are_drawn_in_their_proportions() {
        use super::super::generators::{Discrete, Rng};
        let mut rng = Rng::new(42);
        for name in ["a", "b", "c", "d", "e", "f"] {
            let w = Workload::preset(name).unwrap();
            let chooser = Discrete::new(&w.mix);
            let n = 100_000;
            let mut counts = std::collections::HashMap::new();
            for _ in 0..n {
                *counts.entry(chooser.next(&mut rng).unwrap()).or_insert(0usize) += 1;
            }
            for (p, op) in &w.mix {
                let got = counts.get(op).copied().unwrap_or(0) as f64 / n as f64;
                assert!((got - p).abs() < 0.02, "workload {name} {op:?}: {got} vs {p}");
            }
        }
    }

    #[test]
    fn property_files_override_core_workload_defaults() {
        let p = properties::parse(
            "recordcount=5000\noperationcount=100\nfieldcount=4\nfieldlength=256\n\
             readproportion=0.2\nupdateproportion=0.8\nrequestdistribution=uniform\n\
             scanlengthdistribution=zipfian\nminscanlength=5\nmaxscanlength=50\ninsertorder=ordered\n",
        );
        let w = Workload::from_properties("custom", &p).unwrap();
        assert_eq!((w.record_count, w.operation_count, w.value_size), (5000, 100, 1024));
        assert_eq!((w.proportion(Op::Read), w.proportion(Op::Update)), (0.2, 0.8));
        assert_eq!(w.request_distribution, RequestDistribution::Uniform);
        assert_eq!((w.min_scan_length, w.max_scan_length), (5, 50));
        assert_eq!(w.scan_length_distribution, ScanLengthDistribution::Zipfian);
        assert!(!w.hashed_inserts);
        // CoreWorkload's defaults: 95/5 read/update, uniform, 10 fields of 100 bytes.
        let d = Workload::from_properties("empty", &BTreeMap::new()).unwrap();
        assert_eq!((d.proportion(Op::Read), d.proportion(Op::Update), d.value_size), (0.95, 0.05, 1000));
        assert_eq!(d.request_distribution, RequestDistribution::Uniform);
    }

    #[test]
    fn unsupported_or_bad_properties_are_errors() {
        let bad = |t: &str| Workload::from_properties("x", &properties::parse(t)).unwrap_err();
        assert!(bad("requestdistribution=hotspot").contains("hotspot"));
        assert!(bad("readproportion=abc").contains("readproportion"));
        assert!(bad("readproportion=0\nupdateproportion=0").contains("zero"));
        assert!(bad("minscanlength=10\nmaxscanlength=5").contains("range"));
        assert!(bad("fieldlengthdistribution=zipfian").contains("constant"));
    }
}
