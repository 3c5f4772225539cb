//! Helpers for xbr end-to-end tests.
