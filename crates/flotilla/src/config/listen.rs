//! GitLab's `listen_address`: `<host>:<port>` in Go's form, where `:9252` (no host) listens
//! on every interface (GitLab Runner `docs/configuration/advanced-configuration.md`).

use std::net::IpAddr;

/// The host part of a listen address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenHost {
    /// No host: every interface.
    Any,
    /// An IP address (`127.0.0.1`, `[::1]`).
    Ip(IpAddr),
    /// A name, resolved when the listener is bound (`localhost`).
    Name(String),
}

/// A parsed `listen_address`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddress {
    /// Where.
    pub host: ListenHost,
    /// The port (0: any free port).
    pub port: u16,
}

impl ListenAddress {
    /// Parses `host:port`, `[v6]:port` or `:port`.
    pub fn parse(s: &str) -> Result<ListenAddress, String> {
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| format!("listen_address `{s}` is not <host>:<port> (or :<port>)"))?;
        let port: u16 = port.parse().map_err(|_| {
            format!("listen_address `{s}`: the port must be a number from 0 to 65535")
        })?;
        let bracketed = host.starts_with('[') && host.ends_with(']');
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let host = if bare.is_empty() {
            ListenHost::Any
        } else if let Ok(ip) = bare.parse::<IpAddr>() {
            if ip.is_ipv6() && !bracketed {
                return Err(format!(
                    "listen_address `{s}`: write an IPv6 address in brackets, [{bare}]:{port}"
                ));
            }
            ListenHost::Ip(ip)
        } else if bare.contains(':') || bare.contains('/') {
            return Err(format!("listen_address `{s}`: `{bare}` is not a host"));
        } else {
            ListenHost::Name(bare.to_string())
        };
        Ok(ListenAddress { host, port })
    }

    /// Whether only this machine can connect: `Some(true)` for loopback addresses and
    /// `localhost`, `Some(false)` for every interface or another address, `None` for
    /// another name (known when it is resolved).
    pub fn is_loopback(&self) -> Option<bool> {
        match &self.host {
            ListenHost::Any => Some(false),
            ListenHost::Ip(ip) => Some(match ip {
                IpAddr::V4(v4) => v4.is_loopback(),
                IpAddr::V6(v6) => {
                    v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
                }
            }),
            ListenHost::Name(n) if n.eq_ignore_ascii_case("localhost") => Some(true),
            ListenHost::Name(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitlab_forms() {
        let a = ListenAddress::parse(":9252").unwrap();
        assert_eq!((a.host.clone(), a.port), (ListenHost::Any, 9252));
        assert_eq!(a.is_loopback(), Some(false));
        assert_eq!(
            ListenAddress::parse("127.0.0.1:9252")
                .unwrap()
                .is_loopback(),
            Some(true)
        );
        assert_eq!(
            ListenAddress::parse("[::1]:9252").unwrap().is_loopback(),
            Some(true)
        );
        assert_eq!(
            ListenAddress::parse("[::]:8093").unwrap().is_loopback(),
            Some(false)
        );
        assert_eq!(
            ListenAddress::parse("localhost:9252")
                .unwrap()
                .is_loopback(),
            Some(true)
        );
        assert_eq!(
            ListenAddress::parse("runner.internal:9252")
                .unwrap()
                .is_loopback(),
            None
        );
        for bad in ["9252", "127.0.0.1:", "127.0.0.1:99999", "::1:9252", "a/b:1"] {
            assert!(ListenAddress::parse(bad).is_err(), "{bad}");
        }
    }
}
