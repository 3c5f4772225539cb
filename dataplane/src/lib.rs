//! xbr dataplane.
