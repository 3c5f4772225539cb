//! Netlink message constants and attribute encoding shared by xbr's two
//! hand-encoded netlink clients (`genl`: generic netlink; `conntrack::
//! ctnetlink`: netfilter), which the rtnetlink crates do not cover.

pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLM_F_REQUEST: u16 = 1;
pub(crate) const NLM_F_ACK: u16 = 4;
pub(crate) const NLA_F_NESTED: u16 = 0x8000;
pub(crate) const NLA_TYPE_MASK: u16 = 0x3fff;
pub(crate) const NLMSG_HDRLEN: usize = 16;

/// Appends one attribute (header, value, padding to 4 bytes).
pub(crate) fn put_attr(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = 4 + value.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize((out.len() + 3) & !3, 0);
}

/// Appends a nested attribute whose contents `fill` writes.
pub(crate) fn nest(out: &mut Vec<u8>, kind: u16, fill: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    fill(&mut inner);
    put_attr(out, kind | NLA_F_NESTED, &inner);
}

/// The attributes of a byte range: (type without flags, payload). A
/// malformed length yields `Err(offset)` (of the bad attribute, counted
/// from `base`) once, then the iteration stops.
pub(crate) struct Attrs<'a> {
    buf: &'a [u8],
    at: usize,
    base: usize,
}

impl<'a> Attrs<'a> {
    pub(crate) fn new(buf: &'a [u8], base: usize) -> Self {
        Attrs { buf, at: 0, base }
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<(u16, &'a [u8]), usize>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.buf.get(self.at..)?;
        if rest.is_empty() {
            return None;
        }
        let bad = self.base + self.at;
        if rest.len() < 4 {
            self.at = self.buf.len();
            return Some(Err(bad));
        }
        let len = usize::from(u16::from_ne_bytes([rest[0], rest[1]]));
        let kind = u16::from_ne_bytes([rest[2], rest[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > rest.len() {
            self.at = self.buf.len();
            return Some(Err(bad));
        }
        self.at += (len + 3) & !3;
        Some(Ok((kind, &rest[4..len])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_and_a_bad_length_stops_the_walk() {
        let mut buf = Vec::new();
        put_attr(&mut buf, 1, &[7, 8, 9]);
        nest(&mut buf, 2, |b| put_attr(b, 3, &[1]));
        assert_eq!(buf.len() % 4, 0);
        let got: Vec<_> = Attrs::new(&buf, 0).collect();
        assert_eq!(got[0], Ok((1, &[7u8, 8, 9][..])));
        let (kind, inner) = got[1].unwrap();
        assert_eq!(kind, 2, "the nested flag is masked off");
        assert_eq!(Attrs::new(inner, 0).next(), Some(Ok((3, &[1u8][..]))));
        let bad_at = buf.len();
        // Claims 40 bytes where 4 are left.
        buf.extend_from_slice(&[40, 0, 1, 0]);
        let last = Attrs::new(&buf, 100).last();
        assert_eq!(last, Some(Err(100 + bad_at)));
    }
}
