//! What the sink requires of a frame besides the generator's tag: the
//! configuration of `well_formed()` in bpf/xbrb_sink.c, and its reference
//! in Rust.

/// Checks of the sink's `MAX_CHECKS` (bpf/xbrb_sink.c).
pub const MAX_SINK_CHECKS: usize = 24;
/// `NO_CSUM` in bpf/xbrb_sink.c.
const NO_CSUM: u16 = 0xffff;

/// What a tagged frame must look like to count as received (see
/// bpf/xbrb_sink.c): byte ranges equal to those of an expected frame, and
/// optionally an IPv4 header whose checksum verifies.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SinkChecks {
    /// (offset, mask, value), 4 bytes each, as they are in the frame.
    words: Vec<(u16, [u8; 4], [u8; 4])>,
    csum_ip_off: Option<u16>,
}

impl SinkChecks {
    /// Checks that `ranges` of a received frame equal those of
    /// `expected`, and that the IPv4 header at `csum_ip_off` verifies.
    /// Each range becomes 4-byte words from its start, the last one
    /// masked; the ranges must lie within `expected`, and a range's last
    /// word must too (the sink reads 4 bytes).
    pub fn new(
        expected: &[u8],
        ranges: &[std::ops::Range<usize>],
        csum_ip_off: Option<u16>,
    ) -> Result<SinkChecks, String> {
        let mut words = Vec::new();
        for r in ranges {
            let mut off = r.start;
            while off < r.end {
                let n = (r.end - off).min(4);
                let bytes = expected
                    .get(off..off + 4)
                    .ok_or_else(|| format!("check {r:?} reads past the frame"))?;
                let mut mask = [0u8; 4];
                mask[..n].fill(0xff);
                let value = std::array::from_fn(|i| bytes[i] & mask[i]);
                let o = u16::try_from(off).map_err(|_| format!("offset {off}"))?;
                words.push((o, mask, value));
                off += 4;
            }
        }
        if words.len() > MAX_SINK_CHECKS {
            return Err(format!(
                "{} checks, the sink takes at most {MAX_SINK_CHECKS}",
                words.len()
            ));
        }
        Ok(SinkChecks { words, csum_ip_off })
    }

    /// Whether `frame` passes, as the sink judges it: the reference the
    /// program is tested against.
    pub fn pass(&self, frame: &[u8]) -> bool {
        let words_ok = self.words.iter().all(|(off, mask, value)| {
            let o = usize::from(*off);
            frame
                .get(o..o + 4)
                .is_some_and(|b| (0..4).all(|i| b[i] & mask[i] == value[i]))
        });
        let csum_ok = self.csum_ip_off.is_none_or(|o| {
            let o = usize::from(o);
            frame
                .get(o..o + 20)
                .is_some_and(|h| crate::packet::checksum(h, 0) == 0)
        });
        words_ok && csum_ok
    }

    /// The checks' part of `struct xbrb_sink_cfg`.
    pub(super) fn cfg_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(4 + MAX_SINK_CHECKS * 12);
        b.extend_from_slice(&self.csum_ip_off.unwrap_or(NO_CSUM).to_ne_bytes());
        let n = u16::try_from(self.words.len()).unwrap_or(0);
        b.extend_from_slice(&n.to_ne_bytes());
        for i in 0..MAX_SINK_CHECKS {
            let (off, mask, value) = self.words.get(i).copied().unwrap_or_default();
            b.extend_from_slice(&off.to_ne_bytes());
            b.extend_from_slice(&[0, 0]);
            b.extend_from_slice(&mask);
            b.extend_from_slice(&value);
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_checks_split_ranges_into_masked_words() {
        let frame: Vec<u8> = (0..40).collect();
        let c = SinkChecks::new(&frame, &[0..6, 20..21], Some(0)).unwrap();
        assert_eq!(
            c.words,
            [
                (0, [0xff; 4], [0, 1, 2, 3]),
                (4, [0xff, 0xff, 0, 0], [4, 5, 0, 0]),
                (20, [0xff, 0, 0, 0], [20, 0, 0, 0]),
            ]
        );
        // The bytes the C struct expects: checksum offset, count, then
        // MAX_SINK_CHECKS entries of 12 bytes.
        let b = c.cfg_bytes();
        assert_eq!(b.len(), 4 + MAX_SINK_CHECKS * 12);
        assert_eq!(&b[..4], &[0, 0, 3, 0]);
        assert_eq!(
            &b[4 + 12..4 + 24],
            &[4, 0, 0, 0, 0xff, 0xff, 0, 0, 4, 5, 0, 0]
        );
        assert_eq!(&SinkChecks::default().cfg_bytes()[..4], &[0xff, 0xff, 0, 0]);
        // Byte 6 is not checked, byte 5 is.
        let mut f = frame.clone();
        f[6] = 99;
        let no_csum = SinkChecks::new(&frame, &[0..6, 20..21], None).unwrap();
        assert!(no_csum.pass(&frame) && no_csum.pass(&f));
        f[5] = 99;
        assert!(!no_csum.pass(&f));
        assert!(!c.pass(&frame), "bytes 0..20 are no valid IPv4 header");
        assert!(!no_csum.pass(&frame[..20]), "too short");
        let past = SinkChecks::new(&frame, &[0..4, 38..40], None);
        assert!(past.is_err(), "reads 38..42");
        let many = SinkChecks::new(&[0; 200], &[0..96, 96..100], None);
        assert!(many.is_err(), "25 words");
    }
}
