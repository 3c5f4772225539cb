//! IPv4 prefixes as the agent prints them (`10.128.0.0/14`), and the pod
//! MAC convention (`0a:58:` + the four IPv4 bytes).

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// An IPv4 network: `addr` has no bits set beyond `len` (checked on parse).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    addr: Ipv4Addr,
    len: u8,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("'{0}' is not an IPv4 network (A.B.C.D/LEN with no host bits set)")]
pub struct BadCidr(pub String);

fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    }
}

impl Cidr {
    /// `None` if `len > 32` or `addr` has host bits set.
    pub fn new(addr: Ipv4Addr, len: u8) -> Option<Cidr> {
        (len <= 32 && u32::from(addr) & !mask(len) == 0).then_some(Cidr { addr, len })
    }

    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & mask(self.len) == u32::from(self.addr)
    }

    /// The address `n` past the network address, if it is inside.
    pub fn nth(&self, n: u32) -> Option<Ipv4Addr> {
        let size = 1u64 << (32 - u32::from(self.len));
        (u64::from(n) < size).then(|| Ipv4Addr::from(u32::from(self.addr) + n))
    }

    /// Usable host addresses (network and broadcast excluded).
    pub fn n_hosts(&self) -> u64 {
        (1u64 << (32 - u32::from(self.len))).saturating_sub(2)
    }

    /// The `i`-th sub-network of length `len` (`None` if out of range).
    pub fn subnet(&self, len: u8, i: u32) -> Option<Cidr> {
        if len < self.len || len > 32 {
            return None;
        }
        let count = 1u64 << u32::from(len - self.len);
        if u64::from(i) >= count {
            return None;
        }
        let step = 1u64 << (32 - u32::from(len));
        let base = u64::from(u32::from(self.addr)) + u64::from(i) * step;
        let base = u32::try_from(base).ok()?;
        Cidr::new(Ipv4Addr::from(base), len)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for Cidr {
    type Err = BadCidr;

    fn from_str(s: &str) -> Result<Cidr, BadCidr> {
        let bad = || BadCidr(s.to_string());
        let (a, l) = s.split_once('/').ok_or_else(bad)?;
        let addr: Ipv4Addr = a.parse().map_err(|_| bad())?;
        let len: u8 = l.parse().map_err(|_| bad())?;
        Cidr::new(addr, len).ok_or_else(bad)
    }
}

/// The MAC the openshift-sdn CNI plugin gives a pod (`ip.SetHWAddrByIP`).
pub fn pod_mac(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x0a, 0x58, o[0], o[1], o[2], o[3]]
}

pub use dataplane::netdev::format_mac;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print() {
        let c: Cidr = "10.128.0.0/14".parse().unwrap();
        assert_eq!(c.to_string(), "10.128.0.0/14");
        assert!("10.128.0.1/14".parse::<Cidr>().is_err());
        assert!("10.128.0.0/33".parse::<Cidr>().is_err());
        assert!("10.128.0.0".parse::<Cidr>().is_err());
        assert!("x/1".parse::<Cidr>().is_err());
        assert_eq!("0.0.0.0/0".parse::<Cidr>().unwrap().prefix_len(), 0);
    }

    #[test]
    fn subnets_and_hosts() {
        let cn: Cidr = "10.128.0.0/14".parse().unwrap();
        assert_eq!(cn.subnet(23, 0).unwrap().to_string(), "10.128.0.0/23");
        assert_eq!(cn.subnet(23, 1).unwrap().to_string(), "10.128.2.0/23");
        assert_eq!(cn.subnet(23, 511).unwrap().to_string(), "10.131.254.0/23");
        assert_eq!(cn.subnet(23, 512), None);
        assert_eq!(cn.subnet(13, 0), None);
        let ls = cn.subnet(23, 1).unwrap();
        assert_eq!(ls.nth(1), Some(Ipv4Addr::new(10, 128, 2, 1)));
        assert_eq!(ls.nth(512), None);
        assert_eq!(ls.n_hosts(), 510);
        assert!(cn.contains(Ipv4Addr::new(10, 131, 255, 255)));
        assert!(!cn.contains(Ipv4Addr::new(10, 132, 0, 0)));
    }

    #[test]
    fn mac_of_pod() {
        let mac = pod_mac(Ipv4Addr::new(10, 128, 2, 17));
        assert_eq!(format_mac(mac), "0a:58:0a:80:02:11");
    }
}
