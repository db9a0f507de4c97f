//! Exec and port-forward over the WebSocket channel protocols, mapped to Docker.
//!
//! The framing is the API server's (`staging/src/k8s.io/apiserver/pkg/util/wsstream/conn.go`,
//! now `k8s.io/streaming/pkg/httpstream/wsstream`): every binary message starts with its
//! channel number. Exec (`staging/src/k8s.io/apiserver/pkg/util/proxy/websocket.go` and the
//! kubelet's `pkg/cri/streaming/remotecommand/websocket.go`): channels 0 stdin, 1 stdout,
//! 2 stderr, 3 the error channel carrying a `Status` (v4 and later), 4 resize; an empty
//! message on the lowest writable channel once the session is open; `v5.channel.k8s.io` adds
//! the CLOSE signal, channel 255 with the number of the stream the client closes (constants
//! in `staging/src/k8s.io/apimachinery/pkg/util/remotecommand/constants.go`). At the end the
//! server writes the status, sends a close frame and waits for the client to close
//! (`conns.finish`). Port-forward (`pkg/cri/streaming/portforward/websocket.go`): two channels
//! per port, data `2i` and error `2i+1`, each opened by a message carrying the port as a
//! little-endian `u16`; subprotocol `v4.channel.k8s.io`. SPDY, and the SPDY-over-WebSocket
//! tunnel newer kubectls use for port-forward (`SPDY/3.1+portforward.k8s.io`), are not served.
//!
//! Exec runs through Docker's exec API; port-forward dials the pod's container address.

use super::pods::Store;
use super::server::{Body, error_response};
use super::status::{StatusError, exec_status};
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const CLOSE: u8 = 255;

/// The exec subprotocols served, best first.
const EXEC_PROTOCOLS: &[&str] = &["v5.channel.k8s.io", "v4.channel.k8s.io"];
/// The port-forward subprotocols served (the kubelet's `v4BinaryWebsocketProtocol`).
const FORWARD_PROTOCOLS: &[&str] = &["v4.channel.k8s.io"];

type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// A close frame with code 1000: clients (gorilla's, client-go's) take only a normal closure
/// as the end of the session, anything else (a frame without a code reads as 1005) as an error.
fn normal_close() -> Message {
    Message::Close(Some(tokio_tungstenite::tungstenite::protocol::CloseFrame {
        code: tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode::Normal,
        reason: "".into(),
    }))
}

/// Checks the upgrade request and picks a subprotocol: the first the client lists that is
/// served, as `wsstream.handshake` does. `None` protocol: the client asked for none.
fn negotiate(
    req: &Request<Incoming>,
    served: &[&str],
    none_allowed: bool,
) -> Result<(String, Option<String>), Box<Response<Body>>> {
    let headers = req.headers();
    let is_websocket = headers
        .get("upgrade")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let Some(key) = headers
        .get("sec-websocket-key")
        .and_then(|v| v.to_str().ok())
    else {
        return Err(Box::new(error_response(&StatusError::bad_request(
            "Upgrade request required",
        ))));
    };
    if !is_websocket {
        return Err(Box::new(error_response(&StatusError::bad_request(
            "Upgrade request required",
        ))));
    }
    let offered: Vec<String> = headers
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|p| p.trim().to_string()))
        .filter(|p| !p.is_empty())
        .collect();
    if offered.is_empty() && none_allowed {
        return Ok((derive_accept_key(key.as_bytes()), None));
    }
    match offered.iter().find(|p| served.contains(&p.as_str())) {
        Some(p) => Ok((derive_accept_key(key.as_bytes()), Some(p.clone()))),
        None => Err(Box::new(
            Response::builder()
                .status(StatusCode::FORBIDDEN)
                .body(
                    Full::new(Bytes::from(format!(
                        "requested protocol(s) are not supported: {offered:?}; supports {served:?}"
                    )))
                    .boxed(),
                )
                .unwrap_or_default(),
        )),
    }
}

/// The 101 answer, and the upgraded connection handed to `session` once hyper gives it.
fn upgrade<F, Fut>(
    req: Request<Incoming>,
    accept: String,
    protocol: Option<String>,
    session: F,
) -> Response<Body>
where
    F: FnOnce(Ws) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        let Ok(upgraded) = hyper::upgrade::on(req).await else {
            return;
        };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        session(ws).await;
    });
    let mut response = Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("upgrade", "websocket")
        .header("connection", "Upgrade")
        .header("sec-websocket-accept", accept);
    if let Some(p) = protocol {
        response = response.header("sec-websocket-protocol", p);
    }
    response
        .body(Full::new(Bytes::new()).boxed())
        .unwrap_or_default()
}

fn flag(params: &[(String, String)], name: &str) -> bool {
    params
        .iter()
        .any(|(k, v)| k == name && (v == "true" || v == "1"))
}

/// The container of a running pod, or the error the API server gives when there is none.
fn running_container(
    store: &Store,
    namespace: &str,
    name: &str,
    params: &[(String, String)],
) -> Result<String, StatusError> {
    let pod = store.get(namespace, name)?;
    if let Some((_, wanted)) = params.iter().find(|(k, _)| k == "container") {
        let known = pod["spec"]["containers"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["name"].as_str() == Some(wanted.as_str()))
        });
        if !known {
            return Err(StatusError::bad_request(format!(
                "container {wanted} is not valid for pod {name}"
            )));
        }
    }
    store.container(namespace, name).ok_or_else(|| {
        StatusError::bad_request(format!(
            "pod {name} does not have a host assigned or its container is not running"
        ))
    })
}

/// `GET/POST .../pods/{name}/exec?command=...&stdin=...&stdout=...&stderr=...`.
pub(crate) async fn exec(
    store: Arc<Store>,
    req: Request<Incoming>,
    namespace: &str,
    name: &str,
    params: &[(String, String)],
) -> Response<Body> {
    let container = match running_container(&store, namespace, name, params) {
        Ok(c) => c,
        Err(e) => return error_response(&e),
    };
    let command: Vec<String> = params
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    if command.is_empty() {
        return error_response(&StatusError::bad_request(
            "you must specify at least 1 command",
        ));
    }
    let (stdin, stdout, stderr, tty) = (
        flag(params, "stdin"),
        flag(params, "stdout"),
        flag(params, "stderr"),
        flag(params, "tty"),
    );
    let (accept, protocol) = match negotiate(&req, EXEC_PROTOCOLS, false) {
        Ok(n) => n,
        Err(r) => return *r,
    };
    let v5 = protocol.as_deref() == Some("v5.channel.k8s.io");
    upgrade(req, accept, protocol, move |ws| async move {
        exec_session(
            store,
            ws,
            container,
            command,
            [stdin, stdout, stderr, tty],
            v5,
        )
        .await;
    })
}

async fn exec_session(
    store: Arc<Store>,
    ws: Ws,
    container: String,
    command: Vec<String>,
    [stdin, stdout, stderr, tty]: [bool; 4],
    v5: bool,
) {
    let (mut sink, mut incoming) = ws.split();
    let (out_tx, mut out_rx) = mpsc::channel::<Message>(64);
    let writer = tokio::spawn(async move {
        while let Some(m) = out_rx.recv().await {
            let close = m.is_close();
            if sink.send(m).await.is_err() || close {
                break;
            }
        }
    });
    let send = |channel: u8, data: &[u8]| {
        let mut frame = Vec::with_capacity(data.len() + 1);
        frame.push(channel);
        frame.extend_from_slice(data);
        Message::binary(frame)
    };
    // The lowest writable channel says the session is open.
    let first = if stdout {
        STDOUT
    } else if stderr {
        STDERR
    } else {
        ERROR
    };
    let _ = out_tx.send(send(first, &[])).await;

    let options = CreateExecOptions::<String> {
        attach_stdin: Some(stdin),
        attach_stdout: Some(stdout),
        attach_stderr: Some(stderr),
        tty: Some(tty),
        cmd: Some(command),
        ..Default::default()
    };
    let started = match store.docker.create_exec(&container, options).await {
        Ok(exec) => store
            .docker
            .start_exec(&exec.id, None)
            .await
            .map(|r| (exec.id, r)),
        Err(e) => Err(e),
    };
    let (exec_id, mut output, input) = match started {
        Ok((id, StartExecResults::Attached { output, input })) => (id, output, input),
        Ok((_, StartExecResults::Detached)) | Err(_) => {
            let status = StatusError::internal("the container runtime could not start the command");
            let _ = out_tx
                .send(send(ERROR, status.body.to_string().as_bytes()))
                .await;
            let _ = out_tx.send(normal_close()).await;
            let _ = writer.await;
            return;
        }
    };

    // Stdin in its own task: a command that does not read must not stall its output.
    let (stdin_tx, mut stdin_rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let mut input = input;
        while let Some(chunk) = stdin_rx.recv().await {
            if input.write_all(&chunk).await.is_err() {
                return;
            }
            let _ = input.flush().await;
        }
        // The client closed stdin (v5 CLOSE) or went: the command sees end-of-file.
        let _ = input.shutdown().await;
    });
    let gone = tokio_util::sync::CancellationToken::new();
    let reader_gone = gone.clone();
    let reader = tokio::spawn(async move {
        let mut stdin_tx = Some(stdin_tx);
        while let Some(Ok(message)) = incoming.next().await {
            match message {
                Message::Binary(data) if !data.is_empty() => match data[0] {
                    STDIN => {
                        if let Some(tx) = &stdin_tx
                            && tx.send(data.slice(1..)).await.is_err()
                        {
                            stdin_tx = None;
                        }
                    }
                    CLOSE if v5 && data.get(1) == Some(&STDIN) => stdin_tx = None,
                    _ => {}
                },
                Message::Close(_) => break,
                _ => {}
            }
        }
        reader_gone.cancel();
    });

    let mut client_left = false;
    let severed = store.sever.notified();
    tokio::pin!(severed);
    loop {
        tokio::select! {
            () = gone.cancelled() => { client_left = true; break; }
            () = &mut severed => {
                // Drop the connection as a failing network would: no status, no close frame.
                reader.abort();
                writer.abort();
                return;
            }
            item = output.next() => match item {
                Some(Ok(LogOutput::StdOut { message } | LogOutput::Console { message })) => {
                    if out_tx.send(send(STDOUT, &message)).await.is_err() { client_left = true; break; }
                }
                Some(Ok(LogOutput::StdErr { message })) => {
                    if out_tx.send(send(STDERR, &message)).await.is_err() { client_left = true; break; }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            },
        }
    }
    if !client_left {
        let mut code = -1;
        for attempt in 0..100u64 {
            match store.docker.inspect_exec(&exec_id).await {
                Ok(info) if info.running != Some(true) => {
                    code = info.exit_code.unwrap_or(-1);
                    break;
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(5 + attempt.min(20) * 5)).await,
                Err(_) => break,
            }
        }
        let _ = out_tx
            .send(send(ERROR, exec_status(code).to_string().as_bytes()))
            .await;
        let _ = out_tx.send(normal_close()).await;
        // `finish`: wait for the client to close after the status.
        let _ = tokio::time::timeout(Duration::from_secs(5), gone.cancelled()).await;
    }
    drop(out_tx);
    reader.abort();
    let _ = writer.await;
}

/// `GET/POST .../pods/{name}/portforward?ports=...`.
pub(crate) async fn port_forward(
    store: Arc<Store>,
    req: Request<Incoming>,
    namespace: &str,
    name: &str,
    params: &[(String, String)],
) -> Response<Body> {
    if let Err(e) = running_container(&store, namespace, name, &[]) {
        return error_response(&e);
    }
    let ip = match store.get(namespace, name) {
        Ok(pod) => pod["status"]["podIP"].as_str().unwrap_or("").to_string(),
        Err(e) => return error_response(&e),
    };
    let mut ports = Vec::new();
    for (_, value) in params.iter().filter(|(k, _)| k == "ports") {
        for p in value.split(',') {
            match p.parse::<u16>() {
                Ok(port) if port > 0 => ports.push(port),
                _ => {
                    return error_response(&StatusError::bad_request(format!(
                        "unable to parse \"{value}\" as a port"
                    )));
                }
            }
        }
    }
    if ports.is_empty() {
        return error_response(&StatusError::bad_request(
            "query parameter \"port\" is required",
        ));
    }
    let (accept, protocol) = match negotiate(&req, FORWARD_PROTOCOLS, true) {
        Ok(n) => n,
        Err(r) => return *r,
    };
    let pod = name.to_string();
    upgrade(req, accept, protocol, move |ws| {
        forward_session(ws, ip, ports, pod)
    })
}

async fn forward_session(ws: Ws, ip: String, ports: Vec<u16>, pod: String) {
    let (mut sink, mut incoming) = ws.split();
    let (out_tx, mut out_rx) = mpsc::channel::<Message>(64);
    let writer = tokio::spawn(async move {
        while let Some(m) = out_rx.recv().await {
            let close = m.is_close();
            if sink.send(m).await.is_err() || close {
                break;
            }
        }
    });
    let mut to_pod = Vec::new();
    let mut relays = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let data = (2 * i) as u8;
        let error = data + 1;
        let mut open = vec![data];
        open.extend_from_slice(&port.to_le_bytes());
        let _ = out_tx.send(Message::binary(open.clone())).await;
        open[0] = error;
        let _ = out_tx.send(Message::binary(open)).await;
        let (tx, mut rx) = mpsc::channel::<Bytes>(64);
        to_pod.push(tx);
        let out = out_tx.clone();
        let addr = format!("{ip}:{port}");
        let pod = pod.clone();
        let port = *port;
        relays.push(tokio::spawn(async move {
            let socket = match tokio::net::TcpStream::connect(&addr).await {
                Ok(s) => s,
                Err(e) => {
                    let mut m = vec![error];
                    m.extend_from_slice(
                        format!("error forwarding port {port} to pod {pod}: {e}").as_bytes(),
                    );
                    let _ = out.send(Message::binary(m)).await;
                    return;
                }
            };
            let (mut read, mut write) = socket.into_split();
            let upstream = tokio::spawn(async move {
                while let Some(chunk) = rx.recv().await {
                    if write.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
                let _ = write.shutdown().await;
            });
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                match read.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let mut m = Vec::with_capacity(n + 1);
                        m.push(data);
                        m.extend_from_slice(&buf[..n]);
                        if out.send(Message::binary(m)).await.is_err() {
                            break;
                        }
                    }
                }
            }
            upstream.abort();
        }));
    }
    let reader = tokio::spawn(async move {
        while let Some(Ok(message)) = incoming.next().await {
            match message {
                Message::Binary(data) if !data.is_empty() => {
                    let channel = data[0] as usize;
                    if channel.is_multiple_of(2)
                        && let Some(tx) = to_pod.get(channel / 2)
                    {
                        let _ = tx.send(data.slice(1..)).await;
                    }
                }
                Message::Close(_) => break,
                _ => {}
            }
        }
        // Dropping the senders half-closes every connection to the pod.
    });
    // The session ends when every port's connection has ended, or the client goes.
    let all = futures::future::join_all(relays);
    tokio::pin!(reader);
    tokio::select! {
        _ = all => {}
        _ = &mut reader => {}
    }
    let _ = out_tx.send(normal_close()).await;
    drop(out_tx);
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
    reader.abort();
}
