//! Reading whole messages from a peer that may pause (read timeouts are
//! the connection's inactivity probe).

use std::io::{self, Read};
use std::time::{Duration, Instant};

/// How a [`read_full`] ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Filled {
    Full,
    /// End of stream before the first byte.
    Eof,
    /// The read timeout expired before the first byte.
    Idle,
}

/// Fills `buf` completely. A timeout before the first byte is reported as
/// `Idle`; in the middle of a message the read is retried (bytes already
/// read are kept) for up to `patience` after the first byte, after which
/// it fails with `TimedOut` however the bytes trickle in (a peer sending
/// one byte a second must not hold the connection for ever).
pub(super) fn read_full(
    r: &mut impl Read,
    buf: &mut [u8],
    patience: Option<Duration>,
) -> io::Result<Filled> {
    let mut got = 0;
    let mut first_byte: Option<Instant> = None;
    while let Some(rest) = buf.get_mut(got..).filter(|b| !b.is_empty()) {
        if let (Some(at), Some(p)) = (first_byte, patience) {
            if at.elapsed() > p {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "message not completed in time",
                ));
            }
        }
        match r.read(rest) {
            Ok(0) if got == 0 => return Ok(Filled::Eof),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                got += n;
                first_byte.get_or_insert_with(Instant::now);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) && got == 0 =>
            {
                return Ok(Filled::Idle);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Filled::Full)
}
