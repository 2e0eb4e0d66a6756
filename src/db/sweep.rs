//! The file sweep: deletes what no Version, log head, value-log statistic or pending job needs
//! any more (obsolete tables, log files before the head, collected value files, old manifests).

use parking_lot::MutexGuard;

use super::{DbInner, State};
use crate::error::Error;
use crate::filename::FileKind;

impl DbInner {
    /// Delete table files no live Version references, log files wholly before the log head,
    /// and old manifests. Files numbered at or above the next file number at the time of the
    /// check are left alone: a job may have just created them.
    pub(super) fn delete_obsolete_files(&self, st: &mut MutexGuard<'_, State>) {
        let mut live = st.versions.live_files();
        live.extend(st.pending_outputs.iter().copied());
        let head_file = st.versions.log_head().file;
        let mut vlog_files: std::collections::HashSet<u64> = st.versions.vlog_files().keys().copied().collect();
        // Collected by GC but still readable by an older snapshot or iterator.
        vlog_files.extend(self.gc.pending.lock().iter().map(|(f, _)| *f));
        let manifest = st.versions.manifest_file_number();
        let bound = st.versions.next_file_number();
        MutexGuard::unlocked(st, || {
            let Ok(names) = self.vfs.list(&self.dir) else {
                return;
            };
            for name in names {
                let Some((kind, number)) = crate::filename::parse_file_name(&name) else {
                    continue;
                };
                let obsolete = match kind {
                    FileKind::Table => number < bound && !live.contains(&number),
                    FileKind::Vlog => number < head_file && !vlog_files.contains(&number),
                    // Registered in the manifest before it is created: one that is not any
                    // more was collected (or its creation never finished).
                    FileKind::Cold => number < bound && !vlog_files.contains(&number),
                    FileKind::Manifest => number < manifest,
                    FileKind::Temp => number < bound,
                    _ => false,
                };
                if obsolete {
                    match self.vfs.remove(&self.dir.join(&name)) {
                        // The other background thread swept it first.
                        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => {
                            tracing::warn!(file = %name, error = %e, "could not delete an obsolete file")
                        }
                        Ok(()) => {}
                    }
                    // Evicted after the removal: a reader racing it cannot open or map the
                    // file again and keep its blocks allocated.
                    match kind {
                        FileKind::Table => self.table_cache.evict(number),
                        FileKind::Vlog | FileKind::Cold => self.vlog.evict(number),
                        _ => {}
                    }
                }
            }
        });
    }
}
