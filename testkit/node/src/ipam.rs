//! Pod IP allocation from a loopback range: one address per pod, stable for its lifetime,
//! handed out round-robin so a freed address is not reused at once.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::str::FromStr;

/// An inclusive range of loopback addresses, never containing 127.0.0.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpRange {
    first: u32,
    last: u32,
}

impl IpRange {
    /// The range from `first` to `last`, both in 127.0.0.0/8.
    pub fn new(first: Ipv4Addr, last: Ipv4Addr) -> Result<IpRange, String> {
        let (a, b) = (u32::from(first), u32::from(last));
        if first.octets()[0] != 127 || last.octets()[0] != 127 {
            return Err(format!("pod IP range {first}-{last} is not in 127.0.0.0/8"));
        }
        if a > b {
            return Err(format!("pod IP range {first}-{last} is empty"));
        }
        let host = u32::from(Ipv4Addr::LOCALHOST);
        if (a..=b).contains(&host) {
            return Err(format!("pod IP range {first}-{last} contains 127.0.0.1"));
        }
        Ok(IpRange { first: a, last: b })
    }

    /// Whether `ip` lies in the range.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        (self.first..=self.last).contains(&u32::from(ip))
    }
}

impl Default for IpRange {
    fn default() -> Self {
        IpRange {
            first: u32::from(Ipv4Addr::new(127, 0, 1, 1)),
            last: u32::from(Ipv4Addr::new(127, 0, 255, 254)),
        }
    }
}

impl std::fmt::Display for IpRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}-{}",
            Ipv4Addr::from(self.first),
            Ipv4Addr::from(self.last)
        )
    }
}

impl FromStr for IpRange {
    type Err = String;

    /// Parses `FIRST-LAST`, e.g. `127.0.1.1-127.0.255.254`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, b) = s
            .split_once('-')
            .ok_or_else(|| format!("{s:?} is not FIRST-LAST"))?;
        let parse = |x: &str| {
            x.trim()
                .parse::<Ipv4Addr>()
                .map_err(|e| format!("{x:?}: {e}"))
        };
        IpRange::new(parse(a)?, parse(b)?)
    }
}

/// The addresses in use, by owner (a pod uid).
#[derive(Debug)]
pub struct IpPool {
    range: IpRange,
    by_owner: BTreeMap<String, Ipv4Addr>,
    owners: BTreeMap<Ipv4Addr, String>,
    cursor: u32,
}

impl IpPool {
    /// An empty pool over `range`.
    pub fn new(range: IpRange) -> IpPool {
        IpPool {
            range,
            by_owner: BTreeMap::new(),
            owners: BTreeMap::new(),
            cursor: range.first,
        }
    }

    /// The owner's address: the one it already has, or the next free one.
    /// Addresses ending in .0 or .255 are skipped.
    #[cfg(test)]
    pub fn allocate(&mut self, owner: &str) -> Option<Ipv4Addr> {
        self.allocate_avoiding(owner, &BTreeSet::new())
    }

    /// The owner's address: the one it already has, or the next free one that is not in
    /// `busy` (in use by processes that are not pods of this node). Addresses ending in .0
    /// or .255 are skipped.
    pub fn allocate_avoiding(
        &mut self,
        owner: &str,
        busy: &BTreeSet<Ipv4Addr>,
    ) -> Option<Ipv4Addr> {
        if let Some(ip) = self.by_owner.get(owner) {
            return Some(*ip);
        }
        let size = self.range.last - self.range.first + 1;
        for step in 0..size {
            let candidate = self.range.first + (self.cursor - self.range.first + step) % size;
            let ip = Ipv4Addr::from(candidate);
            let last_octet = ip.octets()[3];
            if last_octet == 0
                || last_octet == 255
                || self.owners.contains_key(&ip)
                || busy.contains(&ip)
            {
                continue;
            }
            self.cursor = if candidate == self.range.last {
                self.range.first
            } else {
                candidate + 1
            };
            self.take(owner, ip);
            return Some(ip);
        }
        None
    }

    /// Gives `ip` to `owner` (a pod that already had it before a node restart); false if
    /// it is outside the range or held by someone else.
    pub fn reserve(&mut self, owner: &str, ip: Ipv4Addr) -> bool {
        if !self.range.contains(ip) {
            return false;
        }
        match self.owners.get(&ip) {
            Some(current) => current == owner,
            None => {
                if self.by_owner.contains_key(owner) {
                    return false;
                }
                self.take(owner, ip);
                true
            }
        }
    }

    /// Frees the owner's address, if it has one.
    pub fn release(&mut self, owner: &str) {
        if let Some(ip) = self.by_owner.remove(owner) {
            self.owners.remove(&ip);
        }
    }

    fn take(&mut self, owner: &str, ip: Ipv4Addr) {
        self.by_owner.insert(owner.to_string(), ip);
        self.owners.insert(ip, owner.to_string());
    }
}

/// The IPv4 addresses with a listening TCP socket, from the text of `/proc/net/tcp`.
pub fn listening_addresses(proc_net_tcp: &str) -> BTreeSet<Ipv4Addr> {
    proc_net_tcp
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let local = fields.nth(1)?;
            let state = fields.nth(1)?;
            if state != "0A" {
                return None;
            }
            let hex = local.split(':').next()?;
            let n = u32::from_str_radix(hex, 16).ok()?;
            Some(Ipv4Addr::from(n.to_le_bytes()))
        })
        .collect()
}

/// The addresses this machine listens on now (empty if that cannot be read).
pub fn busy_addresses() -> BTreeSet<Ipv4Addr> {
    std::fs::read_to_string("/proc/net/tcp")
        .map(|text| listening_addresses(&text))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn first_pod_gets_127_0_1_1() {
        let mut pool = IpPool::new(IpRange::default());
        assert_eq!(pool.allocate("a"), Some(ip("127.0.1.1")));
        assert_eq!(pool.allocate("b"), Some(ip("127.0.1.2")));
    }

    #[test]
    fn allocation_is_stable_for_an_owner() {
        let mut pool = IpPool::new(IpRange::default());
        let a = pool.allocate("a");
        pool.allocate("b");
        assert_eq!(pool.allocate("a"), a);
    }

    #[test]
    fn released_address_is_not_reused_immediately_but_eventually() {
        let mut pool = IpPool::new("127.0.1.1-127.0.1.3".parse().unwrap());
        assert_eq!(pool.allocate("a"), Some(ip("127.0.1.1")));
        pool.release("a");
        assert_eq!(pool.allocate("b"), Some(ip("127.0.1.2")));
        assert_eq!(pool.allocate("c"), Some(ip("127.0.1.3")));
        assert_eq!(pool.allocate("d"), Some(ip("127.0.1.1")));
        assert_eq!(pool.allocate("e"), None);
    }

    #[test]
    fn range_must_not_contain_localhost_nor_leave_loopback() {
        assert!("127.0.0.1-127.0.0.9".parse::<IpRange>().is_err());
        assert!("10.0.0.1-10.0.0.9".parse::<IpRange>().is_err());
        assert!("127.0.2.1-127.0.1.1".parse::<IpRange>().is_err());
    }

    #[test]
    fn addresses_with_listeners_are_skipped() {
        let mut pool = IpPool::new(IpRange::default());
        let busy: BTreeSet<Ipv4Addr> = [ip("127.0.1.1"), ip("127.0.1.2")].into();
        assert_eq!(pool.allocate_avoiding("a", &busy), Some(ip("127.0.1.3")));
    }

    #[test]
    fn listening_sockets_are_read_from_proc_net_tcp() {
        let text = "  sl  local_address rem_address   st tx_queue\n\
            0: 0301007F:094B 00000000:0000 0A 00000000:00000000\n\
            1: 0401007F:094B 0100007F:0000 01 00000000:00000000\n";
        assert_eq!(listening_addresses(text), [ip("127.0.1.3")].into());
    }

    #[test]
    fn range_displays_as_it_parses() {
        let r: IpRange = "127.0.1.1-127.0.2.9".parse().unwrap();
        assert_eq!(r.to_string(), "127.0.1.1-127.0.2.9");
    }

    #[test]
    fn dot_zero_and_dot_255_are_skipped() {
        let mut pool = IpPool::new("127.0.1.255-127.0.2.1".parse().unwrap());
        assert_eq!(pool.allocate("a"), Some(ip("127.0.2.1")));
        assert_eq!(pool.allocate("b"), None);
    }

    #[test]
    fn reserve_keeps_a_previous_address_and_refuses_conflicts() {
        let mut pool = IpPool::new(IpRange::default());
        assert!(pool.reserve("a", ip("127.0.1.5")));
        assert!(pool.reserve("a", ip("127.0.1.5")));
        assert!(!pool.reserve("b", ip("127.0.1.5")));
        assert!(!pool.reserve("c", ip("127.0.0.1")));
        assert_eq!(pool.allocate("a"), Some(ip("127.0.1.5")));
    }
}
