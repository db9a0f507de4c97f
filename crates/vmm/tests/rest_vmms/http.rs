//! A small HTTP/1.1 server on a unix socket for the fakes, and a raw client that sends
//! exactly the bytes a test gives it (to show the fakes refuse bad bodies).

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::Value;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

/// A request as a fake sees it.
#[derive(Debug, Clone)]
pub(crate) struct Req {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) body: Vec<u8>,
}

impl Req {
    /// The body as JSON (`None`: empty or not JSON).
    pub(crate) fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// An answer: status and body.
pub(crate) type Resp = (u16, Vec<u8>);

/// A fake's request handler.
pub(crate) type Handler = Arc<dyn Fn(Req) -> Resp + Send + Sync>;

/// Serves `handler` on a unix socket at `path` until the task is dropped or aborted.
pub(crate) fn serve(path: &str, handler: Handler) -> tokio::task::JoinHandle<()> {
    let listener = UnixListener::bind(path).expect("binding the fake's socket");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let handler = handler.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let handler = handler.clone();
                        async move {
                            let method = req.method().to_string();
                            let path = req.uri().path().to_string();
                            let body = req.into_body().collect().await?.to_bytes().to_vec();
                            let (status, body) = handler(Req { method, path, body });
                            let mut resp = hyper::Response::builder().status(status);
                            if !body.is_empty() {
                                resp = resp.header("content-type", "application/json");
                            }
                            Ok::<_, hyper::Error>(
                                resp.body(Full::new(Bytes::from(body)))
                                    .expect("a valid response"),
                            )
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    })
}

/// Sends `method path` with `body` to the socket at `sock`, and returns the status and
/// body of the answer.
pub(crate) async fn raw(sock: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = UnixStream::connect(sock)
        .await
        .expect("connecting to the fake");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status: u16 = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// Schema checks shared by the fakes: each returns the first violation as a message.
pub(crate) mod schema {
    use serde_json::Value;

    /// `body` is an object whose `required` properties are present, and which has no
    /// property outside `allowed` (Firecracker's types reject unknown fields).
    pub(crate) fn object(body: &Value, required: &[&str], allowed: &[&str]) -> Result<(), String> {
        let obj = body
            .as_object()
            .ok_or_else(|| "invalid type: expected a JSON object".to_string())?;
        for r in required {
            if !obj.contains_key(*r) {
                return Err(format!("missing field `{r}`"));
            }
        }
        if !allowed.is_empty() {
            for k in obj.keys() {
                if !allowed.contains(&k.as_str()) {
                    return Err(format!("unknown field `{k}`, expected one of {allowed:?}"));
                }
            }
        }
        Ok(())
    }

    /// Property `key`, if present, is a string from `values`.
    pub(crate) fn one_of(body: &Value, key: &str, values: &[&str]) -> Result<(), String> {
        match body.get(key) {
            None => Ok(()),
            Some(Value::String(s)) if values.contains(&s.as_str()) => Ok(()),
            Some(v) => Err(format!(
                "unknown variant {v} for `{key}`, expected one of {values:?}"
            )),
        }
    }

    /// Property `key`, if present, has the JSON type `ty` (`string`, `boolean`, `integer`).
    pub(crate) fn typed(body: &Value, key: &str, ty: &str) -> Result<(), String> {
        let Some(v) = body.get(key) else {
            return Ok(());
        };
        let ok = match ty {
            "string" => v.is_string(),
            "boolean" => v.is_boolean(),
            "integer" => v.is_i64() || v.is_u64(),
            _ => true,
        };
        if ok {
            Ok(())
        } else {
            Err(format!("invalid type for `{key}`: expected {ty}, got {v}"))
        }
    }

    /// Integer property `key`, if present, lies in `min..=max`.
    pub(crate) fn range(body: &Value, key: &str, min: i64, max: i64) -> Result<(), String> {
        match body.get(key).and_then(Value::as_i64) {
            Some(n) if n < min || n > max => Err(format!("`{key}` is {n}, outside {min}..={max}")),
            _ => Ok(()),
        }
    }
}
