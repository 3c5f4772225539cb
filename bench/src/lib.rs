//! xbr benchmarks.
