//! How a field's value is written in ovs-ofctl's flow syntax.

/// A field's text syntax (meta-flow's "Formatting").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syntax {
    /// OpenFlow port number or reserved name.
    Port,
    /// Unsigned integer, printed in hex (`0x2a`, `0x2a/0xff`).
    Hex,
    /// Unsigned integer, printed in decimal when exact.
    Dec,
    /// Dotted IPv4, optionally `/prefix` or `/netmask`.
    Ipv4,
    /// Ethernet address, optionally `/mask`.
    Mac,
    /// `+trk-est` style conntrack flags, or a number.
    CtState,
    /// `no|yes|first|later|not_later`.
    Frag,
    /// `nw_tos`: the TOS byte, whose upper 6 bits are the DSCP field.
    Tos,
    /// The 128-bit ct_label, hex with `0x` or decimal; the field's key
    /// field is the label's low half.
    Label,
    /// An IPv6 address, optionally `/prefix` or `/mask-address`; like
    /// `Label`, the key field is the low half of the 128 bits.
    Ipv6,
}
