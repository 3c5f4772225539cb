//! Reading whole messages from a peer that may pause (read timeouts are
//! the connection's inactivity probe).

use std::io::{self, Read};

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
/// read are kept), up to `max_stalls` times.
pub(super) fn read_full(r: &mut impl Read, buf: &mut [u8], max_stalls: u32) -> io::Result<Filled> {
    let mut got = 0;
    let mut stalls = 0;
    while let Some(rest) = buf.get_mut(got..).filter(|b| !b.is_empty()) {
        match r.read(rest) {
            Ok(0) if got == 0 => return Ok(Filled::Eof),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if got == 0 {
                    return Ok(Filled::Idle);
                }
                stalls += 1;
                if stalls > max_stalls {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Filled::Full)
}
