//! Big-endian fields at byte offsets: the one place the packet code reads
//! and writes network-order integers.
//!
//! Two kinds of reader, for two kinds of caller:
//! - [`be16`]/[`be32`]/[`write16`] check the bounds and answer `None`
//!   past the end of the slice: the parsers and rewrites, which walk an
//!   untrusted frame and stop at the first truncated header.
//! - [`field16`]/[`field32`] index directly: the wire views (`vxlan`),
//!   whose `new_checked` has already proven the buffer long enough for
//!   every accessor, so a panic there would be a bug in the view's length
//!   check, never a property of the input.
//!
//! All are `#[inline(always)]`: each compiles to one (bounds-checked) load
//! and a byte swap on the per-packet paths.

/// The big-endian `u16` at `at`, or `None` when `b` ends first.
#[inline(always)]
pub fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// The big-endian `u32` at `at`, or `None` when `b` ends first.
#[inline(always)]
pub fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// Writes `v` big-endian at `at`; `None` (and nothing written) when `f`
/// ends first.
#[inline(always)]
pub fn write16(f: &mut [u8], at: usize, v: u16) -> Option<()> {
    f.get_mut(at..at + 2)?.copy_from_slice(&v.to_be_bytes());
    Some(())
}

/// The big-endian `u16` at `at` of a buffer already proven long enough.
#[inline(always)]
pub fn field16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// The big-endian `u32` at `at` of a buffer already proven long enough.
#[inline(always)]
pub fn field32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
