//! go-plugin's handshake: the environment the host starts a plugin with, and the one line the
//! plugin answers with on its stdout.
//!
//! From hashicorp/go-plugin (v1.8.0, `client.go` `Client.Start`; v1.0.1 `server.go` `Serve`):
//! - the host sets `<MagicCookieKey>=<MagicCookieValue>`, `PLUGIN_MIN_PORT`,
//!   `PLUGIN_MAX_PORT`, `PLUGIN_PROTOCOL_VERSIONS=<v>,<v>...`, and with AutoMTLS
//!   `PLUGIN_CLIENT_CERT=<PEM>`; a plugin started without the cookie says it is a plugin and
//!   exits;
//! - the plugin prints `CORE|APP|NETWORK|ADDRESS|PROTOCOL|SERVER-CERT` on stdout, where CORE is
//!   1, APP the application's protocol version it chose, NETWORK `unix` or `tcp`, PROTOCOL
//!   `grpc` (or `netrpc`, which a non-Go host cannot speak), and SERVER-CERT the plugin's
//!   AutoMTLS certificate as unpadded standard base64 of its DER (empty without AutoMTLS); a
//!   seventh field `|true` says the plugin multiplexes its gRPC broker, and is only sent
//!   when the host set `PLUGIN_MULTIPLEX_GRPC`;
//! - the client splits the trimmed line on `|`, needs at least 4 fields, and reads a 6th
//!   field as a certificate only when it is longer than 50 characters ("rules out catching
//!   the unused extra data returned from some older implementations").

use base64::Engine;
use std::fmt;

/// go-plugin's core protocol version (`CoreProtocolVersion`): the only one there is.
pub const CORE_PROTOCOL_VERSION: u32 = 1;

/// The version of flotilla's InstanceGroup service this build speaks, sent in
/// [`ENV_PROTOCOL_VERSIONS`] and expected back in the handshake's APP field.
pub const INSTANCE_GROUP_PROTOCOL_VERSION: u32 = 1;

/// The magic-cookie variable of flotilla's InstanceGroup plugins. It is no security
/// measure (go-plugin says as much): it keeps a user from running a plugin by hand and
/// wondering why it prints a line and waits.
pub const MAGIC_COOKIE_KEY: &str = "FLOTILLA_PLUGIN_MAGIC_COOKIE";

/// The value of [`MAGIC_COOKIE_KEY`].
pub const MAGIC_COOKIE_VALUE: &str = "7c4b1e9a-instance-group-d2f05c83";

/// The application protocol versions the host accepts, comma-separated.
pub const ENV_PROTOCOL_VERSIONS: &str = "PLUGIN_PROTOCOL_VERSIONS";
/// The lowest TCP port a plugin may listen on (when it listens on TCP).
pub const ENV_MIN_PORT: &str = "PLUGIN_MIN_PORT";
/// The highest TCP port a plugin may listen on.
pub const ENV_MAX_PORT: &str = "PLUGIN_MAX_PORT";
/// The host's AutoMTLS certificate (PEM); set only when the host asks for AutoMTLS.
pub const ENV_CLIENT_CERT: &str = "PLUGIN_CLIENT_CERT";
/// Where a plugin should create its unix socket.
pub const ENV_UNIX_SOCKET_DIR: &str = "PLUGIN_UNIX_SOCKET_DIR";
/// Set by hosts that understand the 7th handshake field (gRPC broker multiplexing).
pub const ENV_MULTIPLEX_GRPC: &str = "PLUGIN_MULTIPLEX_GRPC";

/// flotilla's own addition, ignored by go-plugin plugins: set to `stdin` when the plugin's
/// stdin is a pipe that flotilla holds open for the plugin's whole life. End of file on it
/// means flotilla is gone, and a plugin should exit rather than go on changing capacity
/// for nobody (gitlab-runner#38716). go-plugin hosts hand plugins their own stdin, which a
/// plugin must not read, hence the variable.
pub const ENV_LIFELINE: &str = "FLOTILLA_PLUGIN_LIFELINE";

/// The value of [`ENV_LIFELINE`] that names stdin as the lifeline.
pub const LIFELINE_STDIN: &str = "stdin";

/// The service name whose gRPC health a plugin reports as `SERVING` (go-plugin's
/// `GRPCServiceName`).
pub const HEALTH_SERVICE: &str = "plugin";

/// What go-plugin prints for a binary started without its cookie (v1.8.0 `server.go`).
pub const NOT_STARTED_BY_HOST: &str = "This binary is a plugin. These are not meant to be \
executed directly. Please execute the program that consumes these plugins, which will load \
any plugins automatically";

/// Where a plugin listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    /// A unix socket; the address is its path.
    Unix,
    /// TCP; the address is `host:port`.
    Tcp,
}

impl Network {
    /// The name in the handshake line.
    pub fn as_str(self) -> &'static str {
        match self {
            Network::Unix => "unix",
            Network::Tcp => "tcp",
        }
    }
}

/// The handshake line, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    /// go-plugin's core protocol version ([`CORE_PROTOCOL_VERSION`]).
    pub core_version: u32,
    /// The application protocol version the plugin chose.
    pub app_version: u32,
    /// Where it listens.
    pub network: Network,
    /// The socket path or `host:port`.
    pub address: String,
    /// `grpc` (or `netrpc`).
    pub protocol: String,
    /// The plugin's AutoMTLS certificate, DER; `None` without AutoMTLS.
    pub server_cert: Option<Vec<u8>>,
    /// The 7th field: whether the plugin multiplexes its gRPC broker.
    pub multiplex: Option<bool>,
}

/// Why a handshake line was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// Fewer than four `|`-separated fields (go-plugin: "Unrecognized remote plugin message").
    #[error("unrecognized remote plugin message: {0:?}")]
    Unrecognized(String),
    /// A version field is not a number.
    #[error("the {field} protocol version {value:?} is not a number")]
    BadVersion {
        /// `core` or `app`.
        field: &'static str,
        /// What the plugin sent.
        value: String,
    },
    /// The core protocol is not go-plugin's version 1.
    #[error("incompatible core protocol version {0} (this host speaks {CORE_PROTOCOL_VERSION})")]
    CoreVersion(u32),
    /// The plugin chose an application version the host did not offer.
    #[error(
        "the plugin chose protocol version {got}, which this host does not speak (it offered {offered:?})"
    )]
    AppVersion {
        /// What the plugin chose.
        got: u32,
        /// What the host offered.
        offered: Vec<u32>,
    },
    /// Neither `unix` nor `tcp`.
    #[error("unknown network type {0:?}")]
    Network(String),
    /// Not `grpc`.
    #[error("the plugin speaks {0:?}; only grpc plugins can be used (net/rpc is Go only)")]
    Protocol(String),
    /// The certificate field is not base64 of a certificate.
    #[error("the plugin's certificate is not base64: {0}")]
    Certificate(String),
    /// The 7th field is not a boolean.
    #[error("the multiplexing field {0:?} is not a boolean")]
    Multiplex(String),
}

impl Handshake {
    /// Parses a handshake line, checking it against the application versions the host
    /// `offered`. As go-plugin's client: the line is trimmed, the protocol defaults to
    /// `netrpc` when absent (and is then refused), and a 6th field of 50 characters or fewer
    /// is not a certificate.
    pub fn parse(line: &str, offered: &[u32]) -> Result<Handshake, HandshakeError> {
        let line = line.trim();
        let parts: Vec<&str> = line.split('|').collect();
        if parts.len() < 4 {
            return Err(HandshakeError::Unrecognized(line.to_string()));
        }
        let number = |field: &'static str, value: &str| {
            value
                .parse::<u32>()
                .map_err(|_| HandshakeError::BadVersion {
                    field,
                    value: value.to_string(),
                })
        };
        let core_version = number("core", parts[0])?;
        if core_version != CORE_PROTOCOL_VERSION {
            return Err(HandshakeError::CoreVersion(core_version));
        }
        let app_version = number("app", parts[1])?;
        if !offered.contains(&app_version) {
            return Err(HandshakeError::AppVersion {
                got: app_version,
                offered: offered.to_vec(),
            });
        }
        let network = match parts[2] {
            "unix" => Network::Unix,
            "tcp" => Network::Tcp,
            other => return Err(HandshakeError::Network(other.to_string())),
        };
        let protocol = parts.get(4).copied().unwrap_or("netrpc").to_string();
        if protocol != "grpc" {
            return Err(HandshakeError::Protocol(protocol));
        }
        let server_cert = match parts.get(5) {
            Some(cert) if cert.len() > 50 => Some(
                base64::engine::general_purpose::STANDARD_NO_PAD
                    .decode(cert)
                    .map_err(|e| HandshakeError::Certificate(e.to_string()))?,
            ),
            _ => None,
        };
        let multiplex = match parts.get(6) {
            None => None,
            Some(v) => {
                Some(parse_go_bool(v).ok_or_else(|| HandshakeError::Multiplex(v.to_string()))?)
            }
        };
        Ok(Handshake {
            core_version,
            app_version,
            network,
            address: parts[3].to_string(),
            protocol,
            server_cert,
            multiplex,
        })
    }
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

impl fmt::Display for Handshake {
    /// The line as a plugin prints it (without the newline), as go-plugin's `Serve` does.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cert = self
            .server_cert
            .as_ref()
            .map(|der| base64::engine::general_purpose::STANDARD_NO_PAD.encode(der))
            .unwrap_or_default();
        write!(
            f,
            "{}|{}|{}|{}|{}|{}",
            self.core_version,
            self.app_version,
            self.network.as_str(),
            self.address,
            self.protocol,
            cert
        )?;
        if let Some(m) = self.multiplex {
            write!(f, "|{m}")?;
        }
        Ok(())
    }
}

/// The application versions a host offers, as `PLUGIN_PROTOCOL_VERSIONS` spells them.
pub fn versions_env(versions: &[u32]) -> String {
    versions
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The versions in a `PLUGIN_PROTOCOL_VERSIONS` value (unparsable entries are skipped, as
/// go-plugin's server does with a warning).
pub fn parse_versions_env(value: &str) -> Vec<u32> {
    value
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_go_plugin_prints_is_read() {
        // Seen from a go-plugin 1.0.1 plugin on this machine.
        let h = Handshake::parse("1|1|unix|/tmp/plugin3109603008|grpc|\n", &[1]).unwrap();
        assert_eq!(h.core_version, 1);
        assert_eq!(h.app_version, 1);
        assert_eq!(h.network, Network::Unix);
        assert_eq!(h.address, "/tmp/plugin3109603008");
        assert_eq!(h.protocol, "grpc");
        assert_eq!(h.server_cert, None);
        assert_eq!(h.multiplex, None);
        assert_eq!(h.to_string(), "1|1|unix|/tmp/plugin3109603008|grpc|");
    }

    #[test]
    fn a_certificate_and_the_multiplex_field_round_trip() {
        let h = Handshake {
            core_version: 1,
            app_version: 2,
            network: Network::Tcp,
            address: "127.0.0.1:10001".into(),
            protocol: "grpc".into(),
            server_cert: Some(vec![0x30; 64]),
            multiplex: Some(true),
        };
        let line = h.to_string();
        assert!(!line.contains('='), "unpadded base64: {line}");
        assert_eq!(Handshake::parse(&line, &[1, 2]).unwrap(), h);
    }

    #[test]
    fn a_short_sixth_field_is_not_a_certificate() {
        let h = Handshake::parse("1|1|tcp|127.0.0.1:1234|grpc|extra", &[1]).unwrap();
        assert_eq!(h.server_cert, None);
    }

    #[test]
    fn bad_lines_are_refused_with_what_was_wrong() {
        let offered = [1];
        let cases: [(&str, HandshakeError); 7] = [
            (
                "Listening on 1234",
                HandshakeError::Unrecognized("Listening on 1234".into()),
            ),
            ("2|1|unix|/s|grpc", HandshakeError::CoreVersion(2)),
            (
                "1|x|unix|/s|grpc",
                HandshakeError::BadVersion {
                    field: "app",
                    value: "x".into(),
                },
            ),
            (
                "1|3|unix|/s|grpc",
                HandshakeError::AppVersion {
                    got: 3,
                    offered: vec![1],
                },
            ),
            ("1|1|udp|/s|grpc", HandshakeError::Network("udp".into())),
            ("1|1|unix|/s", HandshakeError::Protocol("netrpc".into())),
            (
                "1|1|unix|/s|grpc||maybe",
                HandshakeError::Multiplex("maybe".into()),
            ),
        ];
        for (line, want) in cases {
            assert_eq!(
                Handshake::parse(line, &offered).unwrap_err(),
                want,
                "{line}"
            );
        }
    }

    #[test]
    fn protocol_versions_env() {
        assert_eq!(versions_env(&[1, 2]), "1,2");
        assert_eq!(parse_versions_env("1, 2,x,3"), vec![1, 2, 3]);
    }
}
