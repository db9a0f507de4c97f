//! HTTP routing of the fake API server: discovery, pods, events, exec and port-forward.
//!
//! Paths and answers from the API reference (kubernetes.io/docs/reference/kubernetes-api/,
//! "Pod v1 core": create `POST /api/v1/namespaces/{ns}/pods` → 201, read `GET .../pods/{name}`,
//! list `GET .../pods` and `GET /api/v1/pods` with `labelSelector`, `fieldSelector`, `watch`,
//! `timeoutSeconds`, delete `DELETE .../pods/{name}` → 200 with the pod) and the discovery
//! documents of `staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go` (`APIVersions`,
//! `APIGroupList`, `APIResourceList`) and `pkg/version/types.go` (`/version`).
//!
//! Discovery is the legacy (unaggregated) form: a client asking for
//! `application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList` first gets plain
//! JSON, which client-go takes as "no aggregated discovery" and reads as legacy documents
//! (`staging/src/k8s.io/client-go/discovery/discovery_client.go`, `downloadLegacy`). Lists are
//! plain `PodList`s even when a `Table` is asked for: kubectl prints those itself.

use super::objects::{self, Kind};
use super::pods::{EVENT_FIELDS, POD_FIELDS, Store};
use super::selector::{FieldSelector, LabelSelector};
use super::status::StatusError;
use super::stream;
use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The body of every answer.
pub(crate) type Body = BoxBody<Bytes, Infallible>;

/// Accepts connections until `stop`.
pub(crate) async fn serve(listener: TcpListener, store: Arc<Store>, stop: CancellationToken) {
    loop {
        let (socket, _) = tokio::select! {
            () = stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(_) => continue,
            },
        };
        let _ = socket.set_nodelay(true);
        let store = store.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let store = store.clone();
                async move { Ok::<_, Infallible>(handle(store, req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(socket), service)
                .with_upgrades();
            tokio::select! {
                _ = conn => {}
                () = stop.cancelled() => {}
            }
        });
    }
}

/// A JSON answer.
pub(crate) fn json_response(status: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())).boxed())
        .unwrap_or_default()
}

/// A `Status` answer.
pub(crate) fn error_response(e: &StatusError) -> Response<Body> {
    json_response(e.code, &e.body)
}

fn query(req: &Request<Incoming>) -> Vec<(String, String)> {
    let Some(q) = req.uri().query() else {
        return Vec::new();
    };
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// Percent-decoding of a query component (`+` is a space).
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn handle(store: Arc<Store>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    store
        .requests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(format!("{} {path}", req.method()));
    let params = query(&req);
    let single: HashMap<String, String> = params.iter().cloned().collect();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let method = req.method().clone();
    match (method.clone(), parts.as_slice()) {
        (Method::GET, ["version"]) => json_response(
            200,
            &json!({
                "major": "1",
                "minor": "32",
                "gitVersion": "v1.32.0-flotilla-fake",
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "go1.23.0",
                "compiler": "gc",
                "platform": "linux/amd64",
            }),
        ),
        (Method::GET, ["api"]) => json_response(
            200,
            &json!({
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
            }),
        ),
        (Method::GET, ["apis"]) => json_response(200, &objects::group_list()),
        (Method::GET, ["apis", group, version]) => {
            let resources = objects::resources(group, version);
            if resources.is_empty() {
                error_response(&StatusError::no_route())
            } else {
                json_response(
                    200,
                    &json!({
                        "kind": "APIResourceList",
                        "groupVersion": format!("{group}/{version}"),
                        "resources": resources,
                    }),
                )
            }
        }
        (Method::GET, ["api", "v1"]) => json_response(200, &resource_list()),
        (Method::GET, ["api", "v1", "namespaces", ns]) => json_response(
            200,
            &json!({
                "kind": "Namespace", "apiVersion": "v1",
                "metadata": {"name": ns},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }),
        ),
        (Method::GET, ["api", "v1", "pods"]) => list_pods(&store, None, &single).await,
        (Method::GET, ["api", "v1", "namespaces", ns, "pods"]) => {
            list_pods(&store, Some(ns), &single).await
        }
        (Method::POST, ["api", "v1", "namespaces", ns, "pods"]) => {
            let body = match req.into_body().collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => {
                    return error_response(&StatusError::bad_request(format!(
                        "reading the body: {e}"
                    )));
                }
            };
            let object: Value = match serde_json::from_slice(&body) {
                Ok(v) => v,
                Err(e) => {
                    return error_response(&StatusError::bad_request(format!(
                        "the body of the request was in an unknown format - accepted media types include: application/json: {e}"
                    )));
                }
            };
            match store.create(ns, object) {
                Ok(pod) => json_response(201, &pod),
                Err(e) => error_response(&e),
            }
        }
        (Method::GET, ["api", "v1", "namespaces", ns, "pods", name]) => match store.get(ns, name) {
            Ok(pod) => json_response(200, &pod),
            Err(e) => error_response(&e),
        },
        (Method::DELETE, ["api", "v1", "namespaces", ns, "pods", name]) => {
            let (ns, name) = (ns.to_string(), name.to_string());
            // DeleteOptions: `gracePeriodSeconds` in the query or in the body (kubectl sends a
            // body; `--now` is 1, `--grace-period=0 --force` is 0).
            let from_query = single
                .get("gracePeriodSeconds")
                .and_then(|v| v.parse::<i64>().ok());
            let from_body = match req.into_body().collect().await {
                Ok(b) => serde_json::from_slice::<Value>(&b.to_bytes())
                    .ok()
                    .and_then(|o| o["gracePeriodSeconds"].as_i64()),
                Err(_) => None,
            };
            match store.delete(&ns, &name, from_query.or(from_body)) {
                Ok(pod) => json_response(200, &pod),
                Err(e) => error_response(&e),
            }
        }
        (Method::GET | Method::POST, ["api", "v1", "namespaces", ns, "pods", name, "exec"]) => {
            let (ns, name) = (ns.to_string(), name.to_string());
            stream::exec(store, req, &ns, &name, &params).await
        }
        (
            Method::GET | Method::POST,
            ["api", "v1", "namespaces", ns, "pods", name, "portforward"],
        ) => {
            let (ns, name) = (ns.to_string(), name.to_string());
            stream::port_forward(store, req, &ns, &name, &params).await
        }
        (_, ["api", "v1", "namespaces", ns, resource, rest @ ..])
            if objects::kind_at("", "v1", resource).is_some() =>
        {
            let kind = objects::kind_at("", "v1", resource);
            let (ns, rest) = (ns.to_string(), rest.iter().map(|s| s.to_string()).collect());
            object_route(&store, method, kind, &ns, rest, req).await
        }
        (
            _,
            [
                "apis",
                group,
                version,
                "namespaces",
                ns,
                resource,
                rest @ ..,
            ],
        ) if objects::kind_at(group, version, resource).is_some() => {
            let kind = objects::kind_at(group, version, resource);
            let (ns, rest) = (ns.to_string(), rest.iter().map(|s| s.to_string()).collect());
            object_route(&store, method, kind, &ns, rest, req).await
        }
        (Method::GET, ["api", "v1", "namespaces", ns, "events"]) => {
            list_events(&store, Some(ns), &single)
        }
        (Method::GET, ["api", "v1", "events"]) => list_events(&store, None, &single),
        (_, ["api", "v1", "namespaces", _, "pods", ..]) => {
            error_response(&StatusError::method_not_supported("pods", method.as_str()))
        }
        _ => error_response(&StatusError::no_route()),
    }
}

/// Create, get, list and delete of the kinds [`objects`] keeps.
async fn object_route(
    store: &Arc<Store>,
    method: Method,
    kind: Option<Kind>,
    ns: &str,
    rest: Vec<String>,
    req: Request<Incoming>,
) -> Response<Body> {
    let Some(kind) = kind else {
        return error_response(&StatusError::no_route());
    };
    let objects = &store.objects;
    let result = match (method, rest.as_slice()) {
        (Method::GET, []) => Ok(json_response(200, &objects.list(kind, ns))),
        (Method::POST, []) => {
            let body = match req.into_body().collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => {
                    return error_response(&StatusError::bad_request(format!(
                        "reading the body: {e}"
                    )));
                }
            };
            match serde_json::from_slice::<Value>(&body) {
                Ok(object) => objects
                    .create(kind, ns, object)
                    .map(|o| json_response(201, &o)),
                Err(e) => Err(StatusError::bad_request(format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json: {e}"
                ))),
            }
        }
        (Method::GET, [name]) => objects.get(kind, ns, name).map(|o| json_response(200, &o)),
        (Method::DELETE, [name]) => objects
            .delete(kind, ns, name)
            .map(|o| json_response(200, &o)),
        (m, _) => Err(StatusError::method_not_supported(kind.resource, m.as_str())),
    };
    result.unwrap_or_else(|e| error_response(&e))
}

fn resource_list() -> Value {
    let mut list = core_resource_list();
    if let Some(r) = list["resources"].as_array_mut() {
        r.extend(objects::resources("", "v1"));
    }
    list
}

fn core_resource_list() -> Value {
    json!({
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            {"name": "namespaces", "singularName": "namespace", "namespaced": false, "kind": "Namespace", "verbs": ["get"], "shortNames": ["ns"]},
            {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod", "verbs": ["create", "delete", "get", "list", "watch"], "shortNames": ["po"], "categories": ["all"]},
            {"name": "pods/exec", "singularName": "", "namespaced": true, "kind": "PodExecOptions", "verbs": ["create", "get"]},
            {"name": "pods/portforward", "singularName": "", "namespaced": true, "kind": "PodPortForwardOptions", "verbs": ["create", "get"]},
            {"name": "events", "singularName": "event", "namespaced": true, "kind": "Event", "verbs": ["get", "list"], "shortNames": ["ev"]},
        ],
    })
}

fn selectors(
    params: &HashMap<String, String>,
    fields: &[&str],
) -> Result<(LabelSelector, FieldSelector), StatusError> {
    let labels = LabelSelector::parse(params.get("labelSelector").map_or("", String::as_str))?;
    let fields = FieldSelector::parse(
        params.get("fieldSelector").map_or("", String::as_str),
        fields,
    )?;
    Ok((labels, fields))
}

async fn list_pods(
    store: &Arc<Store>,
    namespace: Option<&str>,
    params: &HashMap<String, String>,
) -> Response<Body> {
    let (labels, fields) = match selectors(params, POD_FIELDS) {
        Ok(s) => s,
        Err(e) => return error_response(&e),
    };
    let watch = params.get("watch").is_some_and(|w| w == "true" || w == "1");
    if !watch {
        store.reconcile().await;
        let items = store.list(namespace, &labels, &fields);
        return json_response(
            200,
            &json!({
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": store.version()},
                "items": items,
            }),
        );
    }
    // A watch: with no resourceVersion (or "0") the current objects come first as ADDED,
    // then every change ("Efficient detection of changes" in the API concepts).
    let timeout = params
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(1800);
    let from_now = params
        .get("resourceVersion")
        .is_some_and(|v| !v.is_empty() && v != "0");
    let mut receiver = store.watchers.subscribe();
    let initial = if from_now {
        Vec::new()
    } else {
        store.list(namespace, &labels, &fields)
    };
    let namespace = namespace.map(String::from);
    let line = |kind: &str, object: &Value| {
        Ok::<_, Infallible>(Frame::data(Bytes::from(format!(
            "{}\n",
            json!({"type": kind, "object": object})
        ))))
    };
    let initial_frames: Vec<_> = initial.iter().map(|o| line("ADDED", o)).collect();
    let store_for_poll = store.clone();
    let changes = async_stream_of(move |tx| async move {
        let deadline = tokio::time::sleep(Duration::from_secs(timeout));
        tokio::pin!(deadline);
        let mut poll = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                () = &mut deadline => return,
                _ = poll.tick() => store_for_poll.reconcile().await,
                event = receiver.recv() => match event {
                    Ok(event) => {
                        if Store::selects(namespace.as_deref(), &labels, &fields, &event.object)
                            && tx.send(line(event.kind, &event.object)).await.is_err()
                        {
                            return;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(_) => return,
                },
            }
        }
    });
    let body = futures::stream::iter(initial_frames).chain(changes);
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(BodyExt::boxed(StreamBody::new(body)))
        .unwrap_or_default()
}

/// A stream fed by a task through a channel (ends when the task ends or the reader goes).
fn async_stream_of<T, F, Fut>(f: F) -> impl futures::Stream<Item = T> + Send + 'static
where
    T: Send + 'static,
    F: FnOnce(tokio::sync::mpsc::Sender<T>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(f(tx));
    tokio_stream_from(rx)
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn list_events(
    store: &Store,
    namespace: Option<&str>,
    params: &HashMap<String, String>,
) -> Response<Body> {
    let fields = match FieldSelector::parse(
        params.get("fieldSelector").map_or("", String::as_str),
        EVENT_FIELDS,
    ) {
        Ok(f) => f,
        Err(e) => return error_response(&e),
    };
    json_response(
        200,
        &json!({
            "kind": "EventList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": store.version()},
            "items": store.events(namespace, &fields),
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::decode;

    #[test]
    fn query_components_are_percent_decoded() {
        assert_eq!(decode("a%3Db%2Cc"), "a=b,c");
        assert_eq!(decode("sh+-c"), "sh -c");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz"), "%zz");
    }
}
