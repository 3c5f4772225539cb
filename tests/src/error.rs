use std::path::PathBuf;
use thiserror::Error;

/// Everything that can go wrong while setting up or driving a test.
///
/// `Debug` prints the same text as `Display`: a `#[test]` that returns
/// `Err` shows the error's `Debug` form, and these messages (often carrying
/// a command's stderr or xbr's log) are meant to be read as they are.
#[derive(Error)]
pub enum HarnessError {
    #[error(
        "the end-to-end tests need root (network namespaces, veth pairs, XDP): \
         run them as root, e.g. `sudo ./scripts/test`"
    )]
    NotRoot,
    #[error("required tool `{tool}` is not in PATH (install the `{package}` package)")]
    MissingTool { tool: String, package: String },
    #[error("could not start `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("`{command}` {status}\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}")]
    CommandFailed {
        command: String,
        status: String,
        stdout: String,
        stderr: String,
    },
    #[error(
        "xbr binary not found at {}: build it first with `cargo build -p xbr-daemon --bin xbr` \
         (./scripts/test does) or point XBR_BIN at it",
        path.display()
    )]
    XbrNotBuilt { path: PathBuf },
    #[error("xbr did not come up: {reason}\n--- xbr log:\n{log}")]
    XbrStart { reason: String, log: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("OpenFlow: {0}")]
    OpenFlow(String),
    /// A tool ran but its output was not what the harness expects.
    #[error("{0}")]
    Unexpected(String),
}

impl std::fmt::Debug for HarnessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl HarnessError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        HarnessError::Io {
            context: context.into(),
            source,
        }
    }
}
