//! The listener of `listen_address`: `/metrics` and `/debug/health` as GitLab Runner serves
//! them, and the read-only status page (`/`, its script and style, and `/api/status`).
//!
//! The address is GitLab's (`<host>:<port>`, Go's form: `:9252` is every interface). The
//! metrics and health carry nothing secret and are served to anyone who can connect, as
//! GitLab Runner does (its docs: "should not be publicly available"). The status page shows
//! more (job names, instance ids), so it is served without a token only on a loopback
//! address; anywhere else it needs `[flotilla] status_token`, given as `?token=` or
//! `Authorization: Bearer`, and without one configured it is not served at all. Only `GET`
//! and `HEAD` are answered (GitLab's `restrictHTTPMethods`).

use crate::error::MonitorError;
use crate::monitor::Monitor;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const INDEX_HTML: &str = include_str!("page/index.html");
const STATUS_JS: &str = include_str!("page/status.js");
const STATUS_CSS: &str = include_str!("page/status.css");
/// The page's icon (a browser asks for one; without it every load logs a 404).
const FAVICON_SVG: &str = include_str!("page/favicon.svg");

/// Who may see the status page.
#[derive(Clone, PartialEq, Eq)]
pub enum Access {
    /// Anyone who can connect (a loopback address without a token).
    Open,
    /// Whoever presents the token.
    Token(String),
    /// Nobody: a non-loopback address without a token. Metrics and health are still served.
    Refused,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Access::Open => f.write_str("Open"),
            Access::Token(_) => f.write_str("Token([REDACTED])"),
            Access::Refused => f.write_str("Refused"),
        }
    }
}

impl Access {
    /// The rule: a token, when configured, is always needed; without one the page is open
    /// on loopback and refused elsewhere.
    pub fn for_listener(loopback: bool, token: Option<&str>) -> Access {
        match token {
            Some(t) if !t.is_empty() => Access::Token(t.to_string()),
            _ if loopback => Access::Open,
            _ => Access::Refused,
        }
    }
}

/// A bound listener.
#[derive(Debug)]
pub struct Listener {
    listener: TcpListener,
    /// The address it is bound to.
    pub local_addr: SocketAddr,
    /// Whether it accepts only loopback connections.
    pub loopback: bool,
}

/// Parses GitLab's `listen_address` (`host:port`, `[v6]:port`, `:port` for every
/// interface) and binds it. A host name is resolved; a name that resolves to loopback
/// addresses only (`localhost`) counts as loopback.
pub async fn bind(address: &str) -> Result<Listener, MonitorError> {
    let bad = |why: &str| MonitorError::Address {
        address: address.to_string(),
        why: why.to_string(),
    };
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| bad("expected host:port (or :port)"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| bad("the port is not a number from 0 to 65535"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let candidates: Vec<SocketAddr> = if host.is_empty() {
        // Go's net.Listen(":port"): every interface.
        vec![SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)]
    } else if let Ok(ip) = host.parse::<IpAddr>() {
        vec![SocketAddr::new(ip, port)]
    } else {
        tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| bad(&format!("cannot resolve {host}: {e}")))?
            .collect()
    };
    let Some(first) = candidates.first().copied() else {
        return Err(bad("the host resolves to no address"));
    };
    // A name that resolves to both families binds the first, as Go does for listening.
    let listener = TcpListener::bind(first)
        .await
        .map_err(|source| MonitorError::Bind {
            address: first.to_string(),
            source,
        })?;
    let local_addr = listener.local_addr().map_err(|source| MonitorError::Bind {
        address: first.to_string(),
        source,
    })?;
    Ok(Listener {
        listener,
        local_addr,
        loopback: is_loopback(local_addr.ip()),
    })
}

/// Whether `ip` is a loopback address (`::ffff:127.0.0.1` included).
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6 == Ipv6Addr::LOCALHOST || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// What one client may hold of the status port, so that nothing on it can starve the
/// daemon of file descriptors or keep connections for ever (a slow client sending its
/// headers a byte at a time, or a thousand idle ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections served at once; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// How long a request's headers may take to arrive.
    pub header_timeout: Duration,
    /// How long a connection may stay open, busy or idle.
    pub lifetime: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            max_connections: 128,
            header_timeout: Duration::from_secs(10),
            lifetime: Duration::from_secs(120),
        }
    }
}

/// Serves `monitor` on `listener` until `stop` with the default [`ConnectionLimits`].
pub async fn serve(listener: Listener, monitor: Monitor, access: Access, stop: CancellationToken) {
    serve_with(listener, monitor, access, ConnectionLimits::default(), stop).await;
}

/// Serves `monitor` on `listener` until `stop`, within `limits`; connections still open then
/// are dropped.
pub async fn serve_with(
    listener: Listener,
    monitor: Monitor,
    access: Access,
    limits: ConnectionLimits,
    stop: CancellationToken,
) {
    let connections = TaskTracker::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut refused_logged = false;
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            a = listener.listener.accept() => a,
        };
        let (stream, _) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                tracing::warn!(error = %e, "accepting a status connection failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            if !std::mem::replace(&mut refused_logged, true) {
                tracing::warn!(
                    limit = limits.max_connections,
                    "the status port has as many connections as it serves; closing new ones"
                );
            }
            drop(stream);
            continue;
        };
        refused_logged = false;
        let monitor = monitor.clone();
        let access = access.clone();
        let stop = stop.clone();
        connections.spawn(async move {
            let _slot = slot;
            let io = hyper_util::rt::TokioIo::new(stream);
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let response = answer(&monitor, &access, &req);
                async move { Ok::<_, std::convert::Infallible>(response) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(io, service);
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep(limits.lifetime) => {
                    tracing::debug!("closing a status connection open longer than its lifetime");
                }
                r = conn => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "status connection ended with an error");
                    }
                }
            }
        });
    }
    connections.close();
    connections.wait().await;
}

/// Answers one request.
pub fn answer<B>(monitor: &Monitor, access: &Access, req: &Request<B>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n");
    }
    let path = req.uri().path();
    match path {
        "/metrics" => match monitor.metrics_text() {
            Ok(body) => with_type(
                Response::new(Full::new(Bytes::from(body))),
                "text/plain; version=0.0.4; charset=utf-8",
            ),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
        },
        "/debug/health" => {
            let health = monitor.health();
            let status = if health.is_ok() {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            json(status, &health)
        }
        "/status.js" => static_file(STATUS_JS, "text/javascript; charset=utf-8"),
        "/status.css" => static_file(STATUS_CSS, "text/css; charset=utf-8"),
        "/favicon.svg" => static_file(FAVICON_SVG, "image/svg+xml"),
        "/" | "/api/status" => {
            if let Some(refused) = check_access(access, req) {
                return refused;
            }
            if path == "/" {
                static_file(INDEX_HTML, "text/html; charset=utf-8")
            } else {
                json(StatusCode::OK, &monitor.status())
            }
        }
        _ => text(StatusCode::NOT_FOUND, "Not Found\n"),
    }
}

/// `None` when the request may see the page, else the answer refusing it.
fn check_access<B>(access: &Access, req: &Request<B>) -> Option<Response<Full<Bytes>>> {
    match access {
        Access::Open => None,
        Access::Refused => Some(text(
            StatusCode::FORBIDDEN,
            "The status page is served on a non-loopback address only with a token: set \
             [flotilla] status_token and open the page with ?token=...\n",
        )),
        Access::Token(expected) => {
            let bearer = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            let query = req.uri().query().and_then(|q| {
                q.split('&')
                    .find_map(|kv| kv.strip_prefix("token="))
                    .map(percent_decode)
            });
            let given = bearer.map(str::to_string).or(query);
            match given {
                Some(t) if same(t.as_bytes(), expected.as_bytes()) => None,
                _ => Some(text(
                    StatusCode::UNAUTHORIZED,
                    "A token is needed: open the page with ?token=... or send \
                     Authorization: Bearer ...\n",
                )),
            }
        }
    }
}

/// Compares in time independent of where the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Decodes `%XX` escapes and `+` in a query value.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn with_type(mut r: Response<Full<Bytes>>, content_type: &'static str) -> Response<Full<Bytes>> {
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // The page loads nothing from elsewhere: no CDN, no inline script.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self' data:; frame-ancestors 'none'",
        ),
    );
    r
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = with_type(
        Response::new(Full::new(Bytes::from(body.to_string()))),
        "text/plain; charset=utf-8",
    );
    *r.status_mut() = status;
    r
}

fn json<T: serde::Serialize>(status: StatusCode, value: &T) -> Response<Full<Bytes>> {
    match serde_json::to_vec(value) {
        Ok(body) => {
            let mut r = with_type(
                Response::new(Full::new(Bytes::from(body))),
                "application/json",
            );
            *r.status_mut() = status;
            r
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
    }
}

fn static_file(body: &'static str, content_type: &'static str) -> Response<Full<Bytes>> {
    with_type(
        Response::new(Full::new(Bytes::from_static(body.as_bytes()))),
        content_type,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(uri: &str) -> Request<()> {
        Request::get(uri).body(()).unwrap()
    }

    #[test]
    fn access_rules() {
        assert_eq!(Access::for_listener(true, None), Access::Open);
        assert_eq!(Access::for_listener(false, None), Access::Refused);
        assert_eq!(Access::for_listener(false, Some("")), Access::Refused);
        assert_eq!(
            Access::for_listener(true, Some("s3cret")),
            Access::Token("s3cret".into())
        );
        assert_eq!(
            format!("{:?}", Access::Token("s3cret".into())),
            "Token([REDACTED])"
        );
    }

    #[test]
    fn the_page_needs_the_token_and_metrics_do_not() {
        let m = Monitor::new(3, "test").unwrap();
        let token = Access::Token("a b+c".into());
        assert_eq!(
            answer(&m, &token, &get("/")).status(),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            answer(&m, &token, &get("/api/status?token=wrong")).status(),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            answer(&m, &token, &get("/api/status?x=1&token=a%20b%2Bc")).status(),
            StatusCode::OK
        );
        let bearer = Request::get("/api/status")
            .header("Authorization", "Bearer a b+c")
            .body(())
            .unwrap();
        assert_eq!(answer(&m, &token, &bearer).status(), StatusCode::OK);
        assert_eq!(
            answer(&m, &token, &get("/metrics")).status(),
            StatusCode::OK
        );
        assert_eq!(
            answer(&m, &Access::Refused, &get("/")).status(),
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            answer(&m, &Access::Refused, &get("/metrics")).status(),
            StatusCode::OK
        );
        assert_eq!(
            answer(&m, &Access::Open, &get("/")).status(),
            StatusCode::OK
        );
        let post = Request::post("/metrics").body(()).unwrap();
        assert_eq!(
            answer(&m, &Access::Open, &post).status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            answer(&m, &Access::Open, &get("/nope")).status(),
            StatusCode::NOT_FOUND
        );
    }

    #[test]
    fn loopback_addresses() {
        assert!(is_loopback("127.0.0.1".parse().unwrap()));
        assert!(is_loopback("127.1.2.3".parse().unwrap()));
        assert!(is_loopback("::1".parse().unwrap()));
        assert!(is_loopback("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!is_loopback("0.0.0.0".parse().unwrap()));
        assert!(!is_loopback("::".parse().unwrap()));
        assert!(!is_loopback("10.0.0.1".parse().unwrap()));
    }

    #[tokio::test]
    async fn binds_gitlab_style_addresses() {
        let l = bind("127.0.0.1:0").await.unwrap();
        assert!(l.loopback);
        let l = bind("localhost:0").await.unwrap();
        assert!(l.loopback, "{}", l.local_addr);
        let l = bind(":0").await.unwrap();
        assert!(!l.loopback);
        assert!(l.local_addr.ip().is_unspecified());
        for bad in ["9252", "127.0.0.1:http", "127.0.0.1:70000"] {
            assert!(
                matches!(bind(bad).await, Err(MonitorError::Address { .. })),
                "{bad}"
            );
        }
    }
}
