//! OpenFlow 1.3 wire codec and connections.
