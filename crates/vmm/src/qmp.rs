//! A QMP client (QEMU's JSON machine protocol, `docs/interop/qmp-spec.rst`): one JSON object
//! per line; the server greets with `{"QMP": ...}`, capabilities are negotiated with
//! `qmp_capabilities`, commands carry an `id` echoed in their `return` or `error`, and
//! events (`{"event": ...}`) come in between.

use crate::VmmError;
use flotilla_connect::BoxedStream;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{broadcast, mpsc, oneshot};

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, VmmError>>>>>;

/// A QMP connection.
pub struct Qmp {
    out: mpsc::Sender<String>,
    pending: Pending,
    next: AtomicU64,
    events: broadcast::Sender<Value>,
}

impl std::fmt::Debug for Qmp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qmp").finish_non_exhaustive()
    }
}

fn protocol(msg: impl Into<String>) -> VmmError {
    VmmError::Protocol(msg.into(), "qemu")
}

impl Qmp {
    /// Greets the server on `stream` and enters command mode.
    pub async fn connect(stream: BoxedStream, timeout: Duration) -> Result<Qmp, VmmError> {
        let (rd, mut wr) = tokio::io::split(stream);
        let mut lines = BufReader::new(rd).lines();
        let greeting = tokio::time::timeout(timeout, lines.next_line())
            .await
            .map_err(|_| VmmError::Timeout {
                what: "waiting for QEMU's QMP greeting".into(),
                after: timeout,
            })?
            .map_err(|e| protocol(format!("reading the greeting: {e}")))?
            .ok_or_else(|| protocol("the QMP socket closed before the greeting"))?;
        let v: Value = serde_json::from_str(&greeting)
            .map_err(|e| protocol(format!("a greeting that is not JSON: {e}")))?;
        if v.get("QMP").is_none() {
            return Err(protocol(format!("not a QMP greeting: {greeting}")));
        }
        let pending: Pending = Arc::new(Mutex::new(HashMap::new()));
        let (events, _) = broadcast::channel(64);
        let (out, mut out_rx) = mpsc::channel::<String>(16);
        tokio::spawn(async move {
            while let Some(line) = out_rx.recv().await {
                if wr.write_all(line.as_bytes()).await.is_err() || wr.flush().await.is_err() {
                    break;
                }
            }
        });
        {
            let pending = pending.clone();
            let events = events.clone();
            tokio::spawn(async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    let Ok(v) = serde_json::from_str::<Value>(&line) else {
                        continue;
                    };
                    if v.get("event").is_some() {
                        let _ = events.send(v);
                        continue;
                    }
                    let Some(id) = v.get("id").and_then(Value::as_u64) else {
                        continue;
                    };
                    let tx = pending
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&id);
                    if let Some(tx) = tx {
                        let r = match (v.get("return"), v.get("error")) {
                            (Some(r), _) => Ok(r.clone()),
                            (None, Some(e)) => Err(VmmError::Refused {
                                vmm: "qemu",
                                request: String::new(),
                                message: e
                                    .get("desc")
                                    .and_then(Value::as_str)
                                    .unwrap_or("an error without a description")
                                    .to_string(),
                            }),
                            _ => Err(protocol(format!("an answer without a result: {line}"))),
                        };
                        let _ = tx.send(r);
                    }
                }
                // The connection is gone: every waiting command fails.
                pending.lock().unwrap_or_else(|e| e.into_inner()).clear();
            });
        }
        let qmp = Qmp {
            out,
            pending,
            next: AtomicU64::new(1),
            events,
        };
        qmp.execute("qmp_capabilities", None).await?;
        Ok(qmp)
    }

    /// Runs `command` with `arguments` and returns its `return` value.
    pub async fn execute(
        &self,
        command: &str,
        arguments: Option<Value>,
    ) -> Result<Value, VmmError> {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let mut msg = json!({ "execute": command, "id": id });
        if let Some(a) = arguments {
            msg["arguments"] = a;
        }
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        let mut line = msg.to_string();
        line.push('\n');
        self.out
            .send(line)
            .await
            .map_err(|_| protocol(format!("the QMP connection is closed ({command})")))?;
        match rx.await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(VmmError::Refused { vmm, message, .. })) => Err(VmmError::Refused {
                vmm,
                request: command.to_string(),
                message,
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(protocol(format!(
                "the QMP connection closed before answering {command}"
            ))),
        }
    }

    /// Events from now on.
    pub fn events(&self) -> broadcast::Receiver<Value> {
        self.events.subscribe()
    }

    /// Waits until a migration (in or out) has completed, polling `query-migrate`; fails on
    /// `failed` or `cancelled` (with QEMU's error description).
    pub async fn wait_migration(&self, limit: Duration) -> Result<(), VmmError> {
        let start = tokio::time::Instant::now();
        loop {
            let v = self.execute("query-migrate", None).await?;
            match v.get("status").and_then(Value::as_str) {
                Some("completed") => return Ok(()),
                Some(s @ ("failed" | "cancelled")) => {
                    return Err(VmmError::Refused {
                        vmm: "qemu",
                        request: "migrate".into(),
                        message: format!(
                            "{s}: {}",
                            v.get("error-desc")
                                .and_then(Value::as_str)
                                .unwrap_or("no description")
                        ),
                    });
                }
                _ => {}
            }
            if start.elapsed() > limit {
                return Err(VmmError::Timeout {
                    what: "waiting for a migration to complete".into(),
                    after: limit,
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
