//! Where to dial (pure).

use std::net::SocketAddr;

/// Splits a `ConnectInfo` address into host and port: `host:port`, `[v6]:port`, a bare host
/// or a bare IPv6 address (which get `default_port`).
pub fn dial_target(addr: &str, default_port: u16) -> (String, u16) {
    if let Ok(sa) = addr.parse::<SocketAddr>() {
        return (sa.ip().to_string(), sa.port());
    }
    if let Some(rest) = addr.strip_prefix('[')
        && let Some((host, tail)) = rest.split_once(']')
    {
        let port = tail
            .strip_prefix(':')
            .and_then(|p| p.parse().ok())
            .unwrap_or(default_port);
        return (host.to_string(), port);
    }
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => match port.parse() {
            Ok(p) => (host.to_string(), p),
            Err(_) => (addr.to_string(), default_port),
        },
        _ => (addr.to_string(), default_port),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(
            dial_target("127.0.0.1:2222", 22),
            ("127.0.0.1".into(), 2222)
        );
        assert_eq!(dial_target("10.0.0.7", 22), ("10.0.0.7".into(), 22));
        assert_eq!(
            dial_target("host.example", 2200),
            ("host.example".into(), 2200)
        );
        assert_eq!(
            dial_target("host.example:23", 22),
            ("host.example".into(), 23)
        );
        assert_eq!(dial_target("[::1]:2022", 22), ("::1".into(), 2022));
        assert_eq!(dial_target("[::1]", 22), ("::1".into(), 22));
        assert_eq!(dial_target("fe80::1", 22), ("fe80::1".into(), 22));
    }
}
