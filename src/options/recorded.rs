//! The settings that shape a tree's files — merge policy, separation threshold, filters, block
//! and table sizes, compression, light-weight compaction, level sizes — as the manifest records
//! them (RocksDB keeps an OPTIONS file for the same reason). An open that does not name one of
//! them takes the recorded value, so an admin tool that opens a tiered database with default
//! options does not reshape it into leveling; an open that names another value reshapes the
//! tree through ordinary compaction, and says so in the log.
//!
//! The record is text, one `name=value` line per setting, sorted by name: readable in a dump,
//! and a build that does not know a setting skips it with a warning instead of refusing the
//! database.

use super::{Compression, FilterAllocation, MergePolicy, Options};

/// The shaping settings, by the name of their `Options` field.
pub(crate) const SHAPE_SETTINGS: &[&str] = &[
    "auto_tune",
    "block_align",
    "block_restart_interval",
    "block_size_bytes",
    "bloom_bits_per_key",
    "compression",
    "filter_allocation",
    "level_size_ratio",
    "light_weight_compaction",
    "lwc_max_segments",
    "lwc_max_table_bytes",
    "max_bytes_for_level_base",
    "merge_policy",
    "min_separated_value_bytes",
    "num_levels",
    "target_file_size_bytes",
];

/// The record's line naming a keyspace's merge operator (checked, never adopted: an operator
/// is code the caller supplies).
const MERGE_OPERATOR: &str = "merge_operator";

/// The merge operator name `record` holds, if any.
pub(crate) fn recorded_merge_operator(record: &str) -> Option<String> {
    record.lines().find_map(|l| l.strip_prefix("merge_operator=")).map(str::to_string)
}

/// One setting that an open changed from what the manifest recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reshape {
    pub setting: &'static str,
    pub recorded: String,
    pub now: String,
}

fn compression_text(c: Compression) -> String {
    match c {
        Compression::None => "none".into(),
        Compression::Lz4 => "lz4".into(),
        Compression::Zstd(level) => format!("zstd:{level}"),
    }
}

fn policy_text(p: MergePolicy) -> String {
    match p {
        MergePolicy::Leveling => "leveling".into(),
        MergePolicy::Wacky(k) => k.to_string(),
    }
}

impl Options {
    /// The value of shaping setting `name` as the record writes it.
    pub(crate) fn shape_value(&self, name: &str) -> Option<String> {
        Some(match name {
            "auto_tune" => self.auto_tune.to_string(),
            "block_restart_interval" => self.block_restart_interval.to_string(),
            "block_size_bytes" => self.block_size_bytes.to_string(),
            "block_align" => self.block_align.to_string(),
            "bloom_bits_per_key" => self.bloom_bits_per_key.iter().map(f64::to_string).collect::<Vec<_>>().join(","),
            "compression" => compression_text(self.compression),
            "filter_allocation" => match self.filter_allocation {
                FilterAllocation::Uniform => "uniform".into(),
                FilterAllocation::Monkey => "monkey".into(),
            },
            "level_size_ratio" => self.level_size_ratio.to_string(),
            "light_weight_compaction" => self.light_weight_compaction.to_string(),
            "lwc_max_segments" => self.lwc_max_segments.to_string(),
            "lwc_max_table_bytes" => self.lwc_max_table_bytes.to_string(),
            "max_bytes_for_level_base" => self.max_bytes_for_level_base.to_string(),
            "merge_policy" => policy_text(self.merge_policy),
            "min_separated_value_bytes" => self.min_separated_value_bytes.to_string(),
            "num_levels" => self.num_levels.to_string(),
            "target_file_size_bytes" => self.target_file_size_bytes.to_string(),
            _ => return None,
        })
    }

    /// Set shaping setting `name` from its recorded text.
    fn set_shape_value(&mut self, name: &str, v: &str) -> Result<(), String> {
        fn num<T: std::str::FromStr>(v: &str) -> Result<T, String> {
            v.parse().map_err(|_| format!("not a number: {v:?}"))
        }
        match name {
            "auto_tune" => self.auto_tune = num(v)?,
            "block_restart_interval" => self.block_restart_interval = num(v)?,
            "block_size_bytes" => self.block_size_bytes = num(v)?,
            "block_align" => self.block_align = num(v)?,
            "bloom_bits_per_key" => {
                self.bloom_bits_per_key = v.split(',').map(num).collect::<Result<Vec<f64>, _>>()?;
            }
            "compression" => self.compression = Compression::parse(v).ok_or(format!("unknown compression {v:?}"))?,
            "filter_allocation" => {
                self.filter_allocation = match v {
                    "uniform" => FilterAllocation::Uniform,
                    "monkey" => FilterAllocation::Monkey,
                    _ => return Err(format!("unknown filter allocation {v:?}")),
                }
            }
            "level_size_ratio" => self.level_size_ratio = num(v)?,
            "light_weight_compaction" => self.light_weight_compaction = num(v)?,
            "lwc_max_segments" => self.lwc_max_segments = num(v)?,
            "lwc_max_table_bytes" => self.lwc_max_table_bytes = num(v)?,
            "max_bytes_for_level_base" => self.max_bytes_for_level_base = num(v)?,
            "merge_policy" => self.merge_policy = v.parse()?,
            "min_separated_value_bytes" => self.min_separated_value_bytes = num(v)?,
            "num_levels" => self.num_levels = num(v)?,
            "target_file_size_bytes" => self.target_file_size_bytes = num(v)?,
            _ => return Err(format!("unknown setting {name:?}")),
        }
        Ok(())
    }

    /// Whether the caller named shaping setting `name`: through its setter, or by giving the
    /// field a value other than the default.
    fn names_shape(&self, name: &str) -> bool {
        // Under auto-tuning the tuner owns the policy: a named one only starts a new database.
        if name == "merge_policy" && self.auto_tune {
            return false;
        }
        self.named_shape.contains(name) || self.shape_value(name) != Options::default().shape_value(name)
    }

    /// The record of the shaping settings in force: `name=value` lines, sorted by name.
    pub(crate) fn shape_record(&self) -> String {
        let mut record: Vec<String> =
            SHAPE_SETTINGS.iter().filter_map(|n| Some(format!("{n}={}\n", self.shape_value(n)?))).collect();
        if let Some(name) = self.merge_operator_name() {
            record.push(format!("{MERGE_OPERATOR}={name}\n"));
            record.sort();
        }
        record.concat()
    }

    /// Refuse `recorded` (a keyspace's record) when it names a merge operator and these
    /// options set one of another name; without one set, remember the recorded name.
    pub(crate) fn check_merge_operator(&mut self, recorded: &str) -> crate::error::Result<()> {
        let Some(name) = recorded_merge_operator(recorded) else { return Ok(()) };
        match self.merge_operator.as_ref().map(|m| m.name().to_string()) {
            Some(given) if given != name => Err(crate::error::Error::IncompatibleOptions {
                option: "merge_operator",
                existing: format!("{name:?}, the merge operator the keyspace recorded"),
                given: format!("{given:?}"),
            }),
            Some(_) => Ok(()),
            None => {
                self.recorded_merge_operator = Some(name);
                Ok(())
            }
        }
    }

    /// These options with every shaping setting taken from `shape` (named as `shape` names
    /// them): a keyspace's options, the database's others.
    pub(crate) fn with_shape_of(&self, shape: &Options) -> Options {
        let mut o = self.clone();
        for name in SHAPE_SETTINGS {
            if let Some(v) = shape.shape_value(name) {
                // Both values come from the same build: they parse.
                let _ = o.set_shape_value(name, &v);
            }
        }
        o.named_shape = shape.named_shape.clone();
        o.merge_operator = shape.merge_operator.clone();
        o.compaction_filter = shape.compaction_filter.clone();
        o.default_ttl_ms = shape.default_ttl_ms;
        o.recorded_merge_operator = shape.recorded_merge_operator.clone();
        o
    }

    /// These options with the shaping settings a keyspace recorded (`record`), the defaults
    /// for any it did not record.
    pub(crate) fn with_recorded_shape(&self, record: &str) -> Options {
        let mut o = self.with_shape_of(&Options::default());
        o.adopt_shape_record(record);
        o.recorded_merge_operator = recorded_merge_operator(record);
        o
    }

    /// Take the recorded value of every shaping setting the caller did not name; returns the
    /// settings whose value in force now differs from the record (the caller named another
    /// value: the tree is reshaped by compaction).
    pub(crate) fn adopt_shape_record(&mut self, record: &str) -> Vec<Reshape> {
        let mut changed = Vec::new();
        for line in record.lines().filter(|l| !l.is_empty()) {
            let Some((name, value)) = line.split_once('=') else {
                tracing::warn!(line, "ignoring a malformed line of the recorded options");
                continue;
            };
            if name == MERGE_OPERATOR {
                continue;
            }
            let Some(&setting) = SHAPE_SETTINGS.iter().find(|&&s| s == name) else {
                tracing::warn!(setting = name, "ignoring a recorded option this build does not know");
                continue;
            };
            if self.names_shape(setting) {
                let now = self.shape_value(setting).unwrap_or_default();
                if now != value {
                    changed.push(Reshape { setting, recorded: value.to_string(), now });
                }
            } else if let Err(e) = self.set_shape_value(setting, value) {
                tracing::warn!(setting, value, error = %e, "ignoring a recorded option this build cannot read");
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_round_trips_through_its_record() {
        let o = Options::default()
            .merge_policy("bush".parse().expect("bush"))
            .compression(Compression::Zstd(7))
            .bloom_bits_per_key(vec![12.0, 8.5])
            .filter_allocation(FilterAllocation::Uniform)
            .num_levels(9)
            .min_separated_value_bytes(64)
            .block_size_bytes(16384)
            .block_align(false);
        let mut fresh = Options::default();
        assert!(fresh.adopt_shape_record(&o.shape_record()).is_empty(), "nothing named, nothing differs");
        assert_eq!(fresh.shape_record(), o.shape_record());
        assert_eq!(fresh.merge_policy, o.merge_policy);
        assert_eq!(fresh.compression, Compression::Zstd(7));
        assert_eq!(fresh.bloom_bits_per_key, vec![12.0, 8.5]);
        assert!(!fresh.block_align, "block_align=false is recorded and adopted");
    }

    #[test]
    fn a_named_setting_wins_over_the_record_and_is_reported_even_when_it_is_the_default() {
        let recorded = Options::default().merge_policy(MergePolicy::tiering(4)).num_levels(5).shape_record();
        let mut o = Options::default().merge_policy(MergePolicy::Leveling);
        let changed = o.adopt_shape_record(&recorded);
        assert_eq!(o.merge_policy, MergePolicy::Leveling, "named through its setter");
        assert_eq!(o.num_levels, 5, "not named: the record's");
        assert_eq!(changed.len(), 1, "{changed:?}");
        assert_eq!(changed[0].setting, "merge_policy");
        assert_eq!(changed[0].now, "leveling");
    }

    #[test]
    // Assigning the field after `default()` is the point: users outside the crate can.
    #[allow(clippy::field_reassign_with_default)]
    fn a_field_assigned_directly_counts_as_named_and_unknown_lines_are_skipped() {
        let mut o = Options::default();
        o.level_size_ratio = 4;
        let changed = o.adopt_shape_record("level_size_ratio=8\nfuture_setting=1\nno equals sign\nnum_levels=6\n");
        assert_eq!(o.level_size_ratio, 4);
        assert_eq!(o.num_levels, 6);
        assert_eq!(changed, vec![Reshape { setting: "level_size_ratio", recorded: "8".into(), now: "4".into() }]);
    }
}
