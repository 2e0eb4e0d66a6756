//! The five knobs of the Wacky continuum (Dayan & Idreos, SIGMOD'19, Table 1 and Fig. 8), the
//! named designs as settings of them, and their text form (`wacky:T=..,K=..,Z=..,C=..,X=..`).

use std::fmt;

/// Capping ratio C: the largest level's size over the sum of the others.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Capping {
    /// A fixed C (>= 1 is sensible; T − 1 gives the largest level the base ratio T).
    Ratio(f64),
    /// C equal to the number of levels, recomputed as the data grows (SCLL, §3).
    Levels,
}

/// A point of the Wacky continuum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Knobs {
    /// T: base capacity ratio between adjacent smaller levels (> 1).
    pub t: f64,
    /// K: merge greediness at levels 1..L−1: a level keeps up to (r_i − 1)^K runs
    /// (0: one run, leveled; 1: r_i − 1 runs, tiered).
    pub k: f64,
    /// Z: merge greediness at the largest level: up to C^Z runs.
    pub z: f64,
    /// C: capping ratio.
    pub c: Capping,
    /// X: growth exponent of the ratios between smaller levels (1: all T; 2: QLSM-bush,
    /// r_i = T^(X^(L−i−1)), capacities shrink doubly exponentially towards level 1).
    pub x: f64,
}

impl Knobs {
    /// Leveling: one run per level, every level T times the one above.
    pub fn leveling(t: f64) -> Self {
        Knobs { t, k: 0.0, z: 0.0, c: Capping::Ratio(t - 1.0), x: 1.0 }
    }

    /// Tiering: T − 1 runs per level, merged into one run of the next level when full.
    pub fn tiering(t: f64) -> Self {
        Knobs { t, k: 1.0, z: 1.0, c: Capping::Ratio(t - 1.0), x: 1.0 }
    }

    /// Lazy leveling: tiered smaller levels, a leveled largest level.
    pub fn lazy_leveling(t: f64) -> Self {
        Knobs { t, k: 1.0, z: 0.0, c: Capping::Ratio(t - 1.0), x: 1.0 }
    }

    /// Squared capped lazy leveling: lazy leveling with C = L.
    pub fn scll(t: f64) -> Self {
        Knobs { t, k: 1.0, z: 0.0, c: Capping::Levels, x: 1.0 }
    }

    /// QLSM-bush: lazy leveling with capacity ratios squaring towards level 1 (X = 2).
    pub fn bush(t: f64, c: f64) -> Self {
        Knobs { t, k: 1.0, z: 0.0, c: Capping::Ratio(c), x: 2.0 }
    }

    /// Checks the knobs describe a tree: T > 1, K and Z in [0, 1], C > 0, X >= 1.
    pub fn validate(&self) -> Result<(), String> {
        let c_ok = match self.c {
            Capping::Ratio(c) => c.is_finite() && c > 0.0,
            Capping::Levels => true,
        };
        if !(self.t.is_finite() && self.t > 1.0) {
            return Err(format!("T must be above 1, got {}", self.t));
        }
        if !(0.0..=1.0).contains(&self.k) || !(0.0..=1.0).contains(&self.z) {
            return Err(format!("K and Z must be in [0, 1], got K={} Z={}", self.k, self.z));
        }
        if !c_ok {
            return Err("C must be above 0 (or L)".to_string());
        }
        if !(self.x.is_finite() && (1.0..=8.0).contains(&self.x)) {
            return Err(format!("X must be in [1, 8], got {}", self.x));
        }
        Ok(())
    }

    /// Parse `wacky:T=..,K=..,Z=..,C=..,X=..` (any subset, in any order; missing knobs are
    /// lazy leveling's at T = 10; `C=L` is SCLL's rule, `C=T-1` the base ratio's).
    pub fn parse_wacky(s: &str) -> Result<Self, String> {
        let body = s.strip_prefix("wacky:").or_else(|| s.strip_prefix("wacky")).ok_or("expected wacky:...")?;
        let mut k = Knobs::lazy_leveling(10.0);
        let mut c_text = None;
        for part in body.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part.split_once('=').ok_or_else(|| format!("expected KNOB=VALUE, got {part:?}"))?;
            let num = || value.parse::<f64>().map_err(|_| format!("{name}: not a number: {value:?}"));
            match name.trim() {
                "T" | "t" => k.t = num()?,
                "K" | "k" => k.k = num()?,
                "Z" | "z" => k.z = num()?,
                "X" | "x" => k.x = num()?,
                "C" | "c" => c_text = Some(value.trim().to_string()),
                other => return Err(format!("unknown knob {other:?} (T, K, Z, C, X)")),
            }
        }
        k.c = match c_text.as_deref() {
            None | Some("T-1") => Capping::Ratio(k.t - 1.0),
            Some("L") => Capping::Levels,
            Some(v) => Capping::Ratio(v.parse().map_err(|_| format!("C: not a number, T-1 or L: {v:?}"))?),
        };
        k.validate()?;
        Ok(k)
    }
}

impl fmt::Display for Knobs {
    /// `wacky:T=..,K=..,Z=..,C=..,X=..`, which `parse_wacky` reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = match self.c {
            Capping::Ratio(c) => format!("{c}"),
            Capping::Levels => "L".to_string(),
        };
        write!(f, "wacky:T={},K={},Z={},C={c},X={}", self.t, self.k, self.z, self.x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_prints_as_text_that_parses_back_to_it() {
        for k in [
            Knobs::leveling(10.0),
            Knobs::tiering(4.0),
            Knobs::lazy_leveling(6.0),
            Knobs::scll(5.0),
            Knobs::bush(2.0, 1.0),
        ] {
            assert_eq!(Knobs::parse_wacky(&k.to_string()), Ok(k), "{k}");
        }
    }

    #[test]
    fn missing_knobs_default_to_lazy_leveling_and_c_follows_t() {
        let k = Knobs::parse_wacky("wacky:T=4").expect("parse");
        assert_eq!(k, Knobs::lazy_leveling(4.0));
        assert_eq!(Knobs::parse_wacky("wacky:T=3,C=L").expect("parse").c, Capping::Levels);
    }

    #[test]
    fn knobs_outside_the_continuum_are_refused() {
        for bad in
            ["wacky:T=1", "wacky:K=2", "wacky:Z=-1", "wacky:C=0", "wacky:X=0.5", "wacky:Q=1", "wacky:T=x", "tiering"]
        {
            assert!(Knobs::parse_wacky(bad).is_err(), "{bad}");
        }
    }
}
