//! How far an iterator reads separated values ahead of its position: not at all until it has
//! moved sequentially for a few steps, then a depth that doubles while the scan goes on; a
//! pause while the values turn out to be in the page cache (reading ahead gains nothing then),
//! and whether the cache can be trusted enough to read through a mapping.

use super::Step;

/// Entries after the first this many steps in one direction are read ahead.
const SEQUENTIAL_AFTER_STEPS: usize = 2;
/// Values read ahead when read-ahead starts; doubles while the scan goes on.
const FIRST_DEPTH: usize = 2;
/// Steps read-ahead pauses for after a fill found every value in the page cache; then it
/// probes again at `FIRST_DEPTH`.
pub(super) const CACHED_PAUSE_STEPS: usize = 64;

/// How many values to read ahead: none until the iterator has moved `SEQUENTIAL_AFTER_STEPS`
/// times in one direction, then `FIRST_DEPTH`, doubling each time that many more steps are
/// taken, up to `max`. A seek or a change of direction starts over.
#[derive(Debug, Clone)]
pub(super) struct Readahead {
    max: usize,
    last: Option<Step>,
    run: usize,
    depth: usize,
    steps_at_depth: usize,
    /// Steps left without read-ahead because the values were in the page cache.
    paused: usize,
    /// The last step was one of those.
    pausing: bool,
    /// Values read ahead in a row that were in the page cache.
    cached_run: usize,
    /// The depth when the pause began, taken up again when a miss ends it.
    resume_depth: usize,
    /// A pause ran its course with no value missing the page cache since: the scan is in
    /// cached data, and paused steps may read through the mapping between probes.
    trusted: bool,
}

impl Readahead {
    /// `max`: the most values in flight (`ReadOptions::readahead_values`); 0 turns it off.
    pub fn new(max: usize) -> Self {
        Readahead {
            max,
            last: None,
            run: 0,
            depth: 0,
            steps_at_depth: 0,
            paused: 0,
            pausing: false,
            cached_run: 0,
            resume_depth: 0,
            trusted: false,
        }
    }

    /// Forget the access pattern (after a seek).
    pub fn reset(&mut self) {
        // Whether the cache holds the data does not change with the position.
        let trusted = self.trusted;
        *self = Readahead::new(self.max);
        self.trusted = trusted;
    }

    /// Start out trusting the page cache (the values scans read lately were all cached).
    pub fn trust_cache(&mut self) {
        self.trusted = self.max > 0;
    }

    /// Record one step in `dir`; returns how many values to keep read ahead now.
    pub fn step(&mut self, dir: Step) -> usize {
        if self.last != Some(dir) {
            self.reset();
            self.last = Some(dir);
        }
        self.run += 1;
        if self.max == 0 || self.run < SEQUENTIAL_AFTER_STEPS {
            return 0;
        }
        self.pausing = self.paused > 0;
        if self.pausing {
            self.paused -= 1;
            self.trusted |= self.paused == 0;
            return 0;
        }
        if self.depth == 0 {
            self.depth = FIRST_DEPTH.min(self.max);
        } else {
            self.steps_at_depth += 1;
            if self.steps_at_depth >= self.depth {
                self.depth = (self.depth * 2).min(self.max);
                self.steps_at_depth = 0;
            }
        }
        self.depth
    }

    /// Record whether a value read ahead was in the page cache. A window's worth of cached
    /// values in a row pauses read-ahead (`note_cached`); a single one does not, as a scan
    /// half through a log being read into the cache meets both kinds.
    pub fn note_read(&mut self, cached: bool) {
        if !cached {
            self.cached_run = 0;
            self.trusted = false;
            return;
        }
        self.cached_run += 1;
        if self.cached_run >= self.depth.max(FIRST_DEPTH) {
            self.note_cached();
        }
    }

    /// The values just read ahead were all in the page cache: reading further ahead gains
    /// nothing, so read-ahead pauses for `CACHED_PAUSE_STEPS` and then probes again at its
    /// first depth (a warm short scan then wastes at most that many reads when it stops).
    pub fn note_cached(&mut self) {
        if self.depth > 0 {
            self.resume_depth = self.depth;
            self.depth = 0;
            self.steps_at_depth = 0;
            self.cached_run = 0;
            self.paused = CACHED_PAUSE_STEPS;
        }
    }

    /// Whether the last step went without read-ahead because the values were cached.
    pub fn pausing(&self) -> bool {
        self.pausing
    }

    /// Whether a whole pause went by with every value cached (and none missed since): reads
    /// through a mapping are then very likely cached too. A scan entering a half-cached log
    /// keeps probing every step instead, so a value that is not cached costs no blocking
    /// page fault.
    pub fn trusts_cache(&self) -> bool {
        self.trusted
    }

    /// A value read while paused was not in the page cache: the pause ends, and read-ahead
    /// goes on from the next step at the depth it had.
    pub fn note_miss(&mut self) {
        self.trusted = false;
        if self.pausing {
            self.paused = 0;
            self.pausing = false;
            self.depth = self.resume_depth;
            self.steps_at_depth = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_reads_pause_read_ahead() {
        let mut r = Readahead::new(32);
        depths(&mut r, Step::Forward, 20);
        r.note_cached();
        let paused = depths(&mut r, Step::Forward, CACHED_PAUSE_STEPS);
        assert!(paused.iter().all(|&d| d == 0), "paused while values are cached: {paused:?}");
        assert_eq!(depths(&mut r, Step::Forward, 1), [2], "then probes again at the first depth");
        let mut fresh = Readahead::new(32);
        fresh.note_cached();
        assert_eq!(depths(&mut fresh, Step::Forward, 1), [0], "no read-ahead before a run starts");
    }

    fn depths(r: &mut Readahead, dir: Step, n: usize) -> Vec<usize> {
        (0..n).map(|_| r.step(dir)).collect()
    }

    #[test]
    fn readahead_starts_after_sequential_steps_and_doubles_to_the_max() {
        let mut r = Readahead::new(16);
        assert_eq!(depths(&mut r, Step::Forward, 2), [0, 2]);
        // Doubles once as many steps as the current depth have been taken.
        assert_eq!(depths(&mut r, Step::Forward, 2), [2, 4]);
        assert_eq!(depths(&mut r, Step::Forward, 4), [4, 4, 4, 8]);
        assert_eq!(depths(&mut r, Step::Forward, 8), [8, 8, 8, 8, 8, 8, 8, 16]);
        assert!(depths(&mut r, Step::Forward, 100).iter().all(|&d| d == 16));
    }

    #[test]
    fn readahead_resets_on_seek_and_on_turning_around() {
        let mut r = Readahead::new(64);
        depths(&mut r, Step::Forward, 20);
        assert_eq!(r.step(Step::Backward), 0, "a change of direction starts over");
        assert_eq!(r.step(Step::Backward), 2, "reverse scans read ahead too");
        r.reset();
        assert_eq!(depths(&mut r, Step::Backward, 2), [0, 2]);
        assert_eq!(r.step(Step::Forward), 0);
    }

    #[test]
    fn readahead_off_and_small_maxima() {
        let mut off = Readahead::new(0);
        assert!(depths(&mut off, Step::Forward, 50).iter().all(|&d| d == 0));
        let mut one = Readahead::new(1);
        assert_eq!(depths(&mut one, Step::Forward, 5), [0, 1, 1, 1, 1]);
        let mut three = Readahead::new(3);
        assert_eq!(*depths(&mut three, Step::Forward, 10).last().unwrap(), 3);
    }
}
