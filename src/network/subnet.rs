//! CIDR arithmetic for Network specs: parse, contain, overlap. IPv4 and IPv6.

use std::fmt;
use std::net::IpAddr;

/// A network prefix whose host bits are zero, e.g. `192.168.0.0/16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Subnet {
    network: IpAddr,
    prefix: u8,
}

/// What is wrong with a Network's `cidr` or `gateway`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("cidr {found:?} is not valid: expected ADDRESS/PREFIX such as 192.168.0.0/16")]
    CidrSyntax { found: String },
    #[error("cidr {found:?} has prefix length {prefix}, expected at most {max}")]
    PrefixTooLong { found: String, prefix: u8, max: u8 },
    #[error("cidr {found:?} has host bits set: expected the network address, {suggestion}")]
    HostBitsSet { found: String, suggestion: String },
    #[error("gateway {found:?} is not an IP address")]
    GatewaySyntax { found: String },
    #[error("gateway {gateway} is not inside cidr {cidr}")]
    GatewayOutside { gateway: String, cidr: String },
    #[error("gateway {gateway} is the {which} address of cidr {cidr}, expected a host address")]
    GatewayNotHost {
        gateway: String,
        which: &'static str,
        cidr: String,
    },
}

fn bits(ip: IpAddr) -> (u128, u8) {
    match ip {
        IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
        IpAddr::V6(v6) => (u128::from(v6), 128),
    }
}

fn from_bits(value: u128, v4: bool) -> IpAddr {
    if v4 {
        // Only ever called with values that came from a 32-bit address.
        IpAddr::V4(std::net::Ipv4Addr::from(value as u32))
    } else {
        IpAddr::V6(std::net::Ipv6Addr::from(value))
    }
}

fn mask(prefix: u8, width: u8) -> u128 {
    let all: u128 = if width == 128 { u128::MAX } else { (1u128 << width) - 1 };
    if prefix == 0 {
        0
    } else {
        all & !((1u128 << (width - prefix)).wrapping_sub(1)) & all
    }
}

impl Subnet {
    pub fn parse(text: &str) -> Result<Subnet, SpecError> {
        let syntax = || SpecError::CidrSyntax {
            found: text.to_string(),
        };
        let (addr, prefix) = text.trim().split_once('/').ok_or_else(syntax)?;
        let addr: IpAddr = addr.parse().map_err(|_| syntax())?;
        let prefix: u8 = prefix.parse().map_err(|_| syntax())?;
        let (value, width) = bits(addr);
        if prefix > width {
            return Err(SpecError::PrefixTooLong {
                found: text.to_string(),
                prefix,
                max: width,
            });
        }
        let masked = value & mask(prefix, width);
        if masked != value {
            let network = from_bits(masked, width == 32);
            return Err(SpecError::HostBitsSet {
                found: text.to_string(),
                suggestion: format!("{network}/{prefix}"),
            });
        }
        Ok(Subnet { network: addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let (net, width) = bits(self.network);
        let (value, ip_width) = bits(ip);
        width == ip_width && value & mask(self.prefix, width) == net
    }

    pub fn overlaps(&self, other: &Subnet) -> bool {
        let shorter = if self.prefix <= other.prefix { self } else { other };
        let longer = if self.prefix <= other.prefix { other } else { self };
        shorter.contains(longer.network)
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    pub fn network(&self) -> IpAddr {
        self.network
    }

    /// The last address (IPv4 broadcast).
    pub fn last(&self) -> IpAddr {
        let (net, width) = bits(self.network);
        let all: u128 = if width == 128 { u128::MAX } else { (1u128 << width) - 1 };
        from_bits(net | (all & !mask(self.prefix, width)), width == 32)
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// Validates a Network's `cidr` and `gateway` together.
pub fn validate(cidr: &str, gateway: &str) -> Result<(Subnet, IpAddr), SpecError> {
    let subnet = Subnet::parse(cidr)?;
    let gateway_ip: IpAddr = gateway.trim().parse().map_err(|_| SpecError::GatewaySyntax {
        found: gateway.to_string(),
    })?;
    if !subnet.contains(gateway_ip) {
        return Err(SpecError::GatewayOutside {
            gateway: gateway.to_string(),
            cidr: subnet.to_string(),
        });
    }
    // /31 and /32 (and v6 /127, /128) have no network/broadcast distinction (RFC 3021).
    let (_, width) = bits(subnet.network);
    if subnet.prefix + 1 < width {
        if gateway_ip == subnet.network {
            return Err(SpecError::GatewayNotHost {
                gateway: gateway.into(),
                which: "network",
                cidr: subnet.to_string(),
            });
        }
        if width == 32 && gateway_ip == subnet.last() {
            return Err(SpecError::GatewayNotHost {
                gateway: gateway.into(),
                which: "broadcast",
                cidr: subnet.to_string(),
            });
        }
    }
    Ok((subnet, gateway_ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_example_is_valid() {
        let (subnet, gw) = validate("192.168.0.0/16", "192.168.0.1").unwrap();
        assert_eq!(subnet.to_string(), "192.168.0.0/16");
        assert_eq!(gw.to_string(), "192.168.0.1");
        assert_eq!(subnet.last().to_string(), "192.168.255.255");
    }

    #[test]
    fn bad_specs_say_what_and_why() {
        assert!(matches!(
            validate("192.168.0.0", "192.168.0.1"),
            Err(SpecError::CidrSyntax { .. })
        ));
        assert!(matches!(
            validate("300.1.1.0/24", "1.1.1.1"),
            Err(SpecError::CidrSyntax { .. })
        ));
        assert!(matches!(
            validate("10.0.0.0/33", "10.0.0.1"),
            Err(SpecError::PrefixTooLong { max: 32, .. })
        ));
        let err = validate("10.0.0.5/24", "10.0.0.1").unwrap_err();
        assert!(err.to_string().contains("10.0.0.0/24"), "{err}");
        assert!(matches!(
            validate("10.0.0.0/24", "gw"),
            Err(SpecError::GatewaySyntax { .. })
        ));
        let err = validate("10.0.0.0/24", "10.0.1.1").unwrap_err();
        assert_eq!(err.to_string(), "gateway 10.0.1.1 is not inside cidr 10.0.0.0/24");
        assert!(matches!(
            validate("10.0.0.0/24", "10.0.0.0"),
            Err(SpecError::GatewayNotHost { which: "network", .. })
        ));
        assert!(matches!(
            validate("10.0.0.0/24", "10.0.0.255"),
            Err(SpecError::GatewayNotHost { which: "broadcast", .. })
        ));
        assert!(validate("10.0.0.0/31", "10.0.0.0").is_ok());
        assert!(matches!(
            validate("10.0.0.0/24", "fd00::1"),
            Err(SpecError::GatewayOutside { .. })
        ));
    }

    #[test]
    fn ipv6_works() {
        let (subnet, _) = validate("fd00:10::/64", "fd00:10::1").unwrap();
        assert!(subnet.contains("fd00:10::ffff".parse().unwrap()));
        assert!(!subnet.contains("fd00:11::1".parse().unwrap()));
        assert!(Subnet::parse("::/0").unwrap().contains("2001:db8::1".parse().unwrap()));
    }

    #[test]
    fn overlap_is_symmetric_and_exact() {
        let a = Subnet::parse("10.0.0.0/16").unwrap();
        let b = Subnet::parse("10.0.5.0/24").unwrap();
        let c = Subnet::parse("10.1.0.0/16").unwrap();
        assert!(a.overlaps(&b) && b.overlaps(&a));
        assert!(!a.overlaps(&c) && !c.overlaps(&a));
        assert!(Subnet::parse("0.0.0.0/0").unwrap().overlaps(&c));
        assert!(!a.overlaps(&Subnet::parse("fd00::/8").unwrap()));
    }
}
