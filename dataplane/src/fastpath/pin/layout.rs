//! The layout record of a bridge's pin directory: which xbr made the
//! pinned maps and programs, and whether this build may use them.
//!
//! A one-entry array map pinned as `layout` (it is a BPF map so that it
//! lives and dies with the other pins on the same filesystem): 8 bytes of
//! magic, the layout version (u32, native order), 4 bytes of padding and
//! the maker's xbr version, NUL-padded. [`LAYOUT`] changes whenever the
//! pinned maps' set, types or entry layouts (bpf/xbr_xdp.c,
//! `cache/entry.rs`) change in a way an older or newer program or
//! loader would misread; a record with another number (or no record, or a
//! damaged one) is never adopted.

use super::PinError;
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};
use std::path::Path;
use thiserror::Error;

/// The layout this build writes and adopts.
pub const LAYOUT: u32 = 1;
const MAGIC: &[u8; 8] = b"XBRPIN\0\0";
const VALUE_SIZE: usize = 64;
const VERSION_AT: usize = 16;
pub(super) const NAME: &str = "xbr_layout";

/// Why a pinned layout record cannot be understood (the directory is
/// then cleared, not adopted).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LayoutError {
    #[error("opening it: {0}")]
    Open(String),
    #[error("a {map_type} map with {value_size}-byte values, not a layout record")]
    NotARecord { map_type: String, value_size: u32 },
    #[error("reading it: {0}")]
    Read(String),
    #[error("an empty record")]
    Empty,
    #[error("a {0}-byte record (expected {VALUE_SIZE})")]
    Size(usize),
    #[error("no xbr layout record (bad magic)")]
    Magic,
}

/// What a layout record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub layout: u32,
    /// The xbr version that wrote it.
    pub version: String,
}

impl Layout {
    /// This build's record.
    pub fn ours() -> Layout {
        Layout {
            layout: LAYOUT,
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    fn encode(&self) -> [u8; VALUE_SIZE] {
        let mut v = [0u8; VALUE_SIZE];
        v[..8].copy_from_slice(MAGIC);
        v[8..12].copy_from_slice(&self.layout.to_ne_bytes());
        let ver = self.version.as_bytes();
        let n = ver.len().min(VALUE_SIZE - VERSION_AT - 1);
        v[VERSION_AT..VERSION_AT + n].copy_from_slice(&ver[..n]);
        v
    }

    /// The record in `v`, or why it is not one.
    fn decode(v: &[u8]) -> Result<Layout, LayoutError> {
        if v.len() != VALUE_SIZE {
            return Err(LayoutError::Size(v.len()));
        }
        if &v[..8] != MAGIC {
            return Err(LayoutError::Magic);
        }
        let layout = u32::from_ne_bytes([v[8], v[9], v[10], v[11]]);
        let ver = &v[VERSION_AT..];
        let end = ver.iter().position(|&b| b == 0).unwrap_or(ver.len());
        Ok(Layout {
            layout,
            version: String::from_utf8_lossy(&ver[..end]).into_owned(),
        })
    }
}

/// Reads the record pinned at `path`: `Ok(None)` if there is none,
/// `Err` with the reason if it cannot be understood.
pub fn read(path: &Path) -> Result<Option<Layout>, LayoutError> {
    if !path.exists() {
        return Ok(None);
    }
    // libbpf_rs::Error is neither Clone nor PartialEq: its text is kept.
    let map = MapHandle::from_pinned_path(path).map_err(|e| LayoutError::Open(e.to_string()))?;
    if map.map_type() != MapType::Array || map.value_size() as usize != VALUE_SIZE {
        return Err(LayoutError::NotARecord {
            map_type: format!("{:?}", map.map_type()),
            value_size: map.value_size(),
        });
    }
    let value = map
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
        .map_err(|e| LayoutError::Read(e.to_string()))?
        .ok_or(LayoutError::Empty)?;
    Layout::decode(&value).map(Some)
}

/// Writes `layout` as a new record pinned at `path` (which must not
/// exist).
pub fn write(path: &Path, layout: &Layout) -> Result<(), PinError> {
    let opts = libbpf_sys::bpf_map_create_opts {
        sz: size_of::<libbpf_sys::bpf_map_create_opts>() as libbpf_sys::size_t,
        ..Default::default()
    };
    let err = |source| PinError::Map {
        name: NAME,
        path: path.to_path_buf(),
        source,
    };
    let mut map = MapHandle::create(MapType::Array, Some(NAME), 4, VALUE_SIZE as u32, 1, &opts)
        .map_err(err)?;
    map.update(&0u32.to_ne_bytes(), &layout.encode(), MapFlags::ANY)
        .map_err(err)?;
    map.pin(path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_and_refuses_garbage() {
        let ours = Layout::ours();
        assert_eq!(Layout::decode(&ours.encode()), Ok(ours));
        assert!(Layout::decode(&[0u8; VALUE_SIZE]).is_err());
        assert!(Layout::decode(&[0u8; 8]).is_err());
        let long = Layout {
            layout: 7,
            version: "x".repeat(200),
        };
        let back = Layout::decode(&long.encode()).unwrap();
        assert_eq!(back.layout, 7);
        assert_eq!(back.version.len(), VALUE_SIZE - VERSION_AT - 1);
    }
}
