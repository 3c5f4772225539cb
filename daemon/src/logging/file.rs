//! The log file: appended to, and opened again by its path on
//! `ovs-appctl vlog/reopen`, so logrotate's rename-then-reopen (as
//! `/etc/logrotate.d/openvswitch` does for ovs-vswitchd) works.
//!
//! One `File` behind a mutex: each event is formatted into a buffer by
//! tracing-subscriber and written with one `write` under the lock (log
//! lines from several threads do not interleave); reopening swaps the
//! `File` under the same lock, so no line is split across the two.

use super::LogError;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use tracing_subscriber::fmt::MakeWriter;

pub struct LogFile {
    path: PathBuf,
    file: Mutex<File>,
}

fn open(path: &Path) -> Result<File, LogError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| LogError::Open {
            path: path.to_path_buf(),
            source,
        })
}

impl LogFile {
    pub fn open(path: &Path) -> Result<LogFile, LogError> {
        Ok(LogFile {
            path: path.to_path_buf(),
            file: Mutex::new(open(path)?),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the path again; the old file (renamed or not) is closed.
    /// If the path cannot be opened, logging goes on to the old file.
    pub fn reopen(&self) -> Result<(), LogError> {
        let new = open(&self.path)?;
        *self.file.lock().unwrap_or_else(|e| e.into_inner()) = new;
        Ok(())
    }
}

/// One event's write, holding the file's lock.
pub struct Writer<'a>(MutexGuard<'a, File>);

impl Write for Writer<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// The process's log file lives as long as the process (it is kept in
/// a `static`), so its writers borrow it for `'static`.
impl MakeWriter<'_> for &'static LogFile {
    type Writer = Writer<'static>;
    fn make_writer(&self) -> Self::Writer {
        let file: &'static LogFile = self;
        Writer(file.file.lock().unwrap_or_else(|e| e.into_inner()))
    }
}
