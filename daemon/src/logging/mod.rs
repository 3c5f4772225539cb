//! xbr's log: tracing events through a filter to stderr or a file, in
//! text or JSON lines, with repeated warnings rate limited per call site.
//!
//! - Levels: `XBR_LOG` at start (default `info`, EnvFilter syntax), then
//!   `xbr log BRIDGE DIRECTIVES`, or `ovs-appctl vlog/set MODULE:LEVEL`
//!   for one of the modules `vlog/list` shows (each one of xbr's code
//!   modules, mapped onto its tracing target: [`modules`]), as
//!   ovs-vswitchd's levels change while it runs.
//! - Destination: stderr, or `--log-file PATH` (appended to, never
//!   truncated), which `ovs-appctl vlog/reopen` opens again by its path
//!   after logrotate renamed it ([`file`](mod@file)).
//! - Format: `--log-format text` (the default; no colours in a file) or
//!   `json`, one JSON object per line (tracing-subscriber's JSON format),
//!   for journald's or a log shipper's parsers.
//! - Rate limit: warnings and errors from one call site beyond a burst
//!   are suppressed until the call site's budget refills, then a line
//!   says how many were dropped, as OVS's VLOG_RATE_LIMIT does
//!   ([`ratelimit`]); the total is `xbr_log_messages_suppressed_total`.
//!
//! The subscriber is installed once per process; the filter, the file
//! and the per-module levels are process-wide (every bridge shares them).

pub mod file;
pub mod modules;
pub mod ratelimit;

use std::path::PathBuf;
use std::sync::OnceLock;
use thiserror::Error;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Layer, Registry};

#[derive(Debug, Error)]
pub enum LogError {
    #[error("logging is not set up")]
    NotSetUp,
    #[error("bad log directives `{directives}`: {reason}")]
    BadDirectives { directives: String, reason: String },
    #[error("cannot change the log filter: {0}")]
    Reload(String),
    #[error("cannot open log file {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("Logging to file not configured")]
    NoFile,
    #[error("{0}")]
    Vlog(String),
}

/// How a run logs (`xbr run`'s `--log-*` options).
#[derive(Clone, Debug, Default)]
pub struct LogOptions {
    pub file: Option<PathBuf>,
    pub json: bool,
    pub rate: ratelimit::RateLimit,
}

/// The filter in force, replaceable while running.
static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();
/// The log file, when logging to one.
static FILE: OnceLock<file::LogFile> = OnceLock::new();

/// Installs the process's subscriber to stderr with the default options
/// (commands other than `xbr run`); call once, first thing.
pub fn init() {
    // Stderr cannot fail to open.
    let _ = init_with(&LogOptions::default());
}

/// Installs the process's subscriber as `options` say; an error if the
/// log file cannot be opened (nothing is installed then).
pub fn init_with(options: &LogOptions) -> Result<(), LogError> {
    let directives = std::env::var("XBR_LOG").unwrap_or_default();
    let filter = match EnvFilter::try_new(&directives) {
        Ok(f) if !directives.trim().is_empty() => f,
        _ => EnvFilter::new("info"),
    };
    let (filter, handle) = reload::Layer::new(filter);
    let output: Box<dyn Layer<_> + Send + Sync> = match &options.file {
        Some(path) => {
            let f = file::LogFile::open(path)?;
            let f = FILE.get_or_init(|| f);
            let layer = tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(f);
            if options.json {
                layer.json().boxed()
            } else {
                layer.boxed()
            }
        }
        None => {
            let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
            if options.json {
                layer.json().with_ansi(false).boxed()
            } else {
                layer.boxed()
            }
        }
    };
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(ratelimit::Limiter::new(options.rate))
        .with(output)
        .try_init();
    if installed.is_ok() {
        let _ = FILTER.set(handle);
    }
    Ok(())
}

/// The filter in force, as directives (`info`, `info,dataplane::vxlan=debug`).
pub fn filter() -> Result<String, LogError> {
    let handle = FILTER.get().ok_or(LogError::NotSetUp)?;
    handle
        .with_current(|f| f.to_string())
        .map_err(|e| LogError::Reload(e.to_string()))
}

/// Replaces the filter with `directives` (EnvFilter syntax, as `XBR_LOG`
/// takes); returns the filter now in force. A bad directive changes
/// nothing.
pub fn set_filter(directives: &str) -> Result<String, LogError> {
    let new = EnvFilter::try_new(directives).map_err(|e| LogError::BadDirectives {
        directives: directives.to_string(),
        reason: e.to_string(),
    })?;
    let handle = FILTER.get().ok_or(LogError::NotSetUp)?;
    handle
        .reload(new)
        .map_err(|e| LogError::Reload(e.to_string()))?;
    filter()
}

/// `ovs-appctl vlog/reopen`: opens the log file again by its path (after
/// logrotate renamed it, the path names a new file).
pub fn reopen() -> Result<(), LogError> {
    FILE.get().ok_or(LogError::NoFile)?.reopen()
}

/// Where the log goes: the file's path, or `None` for stderr.
pub fn file_path() -> Option<PathBuf> {
    FILE.get().map(|f| f.path().to_path_buf())
}

/// Messages the rate limit has suppressed since start.
pub fn suppressed_total() -> u64 {
    ratelimit::suppressed_total()
}

/// `ovs-appctl vlog/list`.
pub fn vlog_list() -> Result<String, LogError> {
    Ok(modules::list_text(&filter()?, FILE.get().is_some()))
}

/// `ovs-appctl vlog/set SPEC` (OVS's `module:destination:level`).
pub fn vlog_set(spec: &str) -> Result<(), LogError> {
    let directives = modules::set(&filter()?, spec)?;
    set_filter(&directives).map(|_| ())
}
