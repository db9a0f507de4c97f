//! A fake Cloud Hypervisor API, written from `vmm/src/api/openapi/cloud-hypervisor.yaml`
//! (cloud-hypervisor/cloud-hypervisor @ ae44c297): each path's documented statuses (404 not
//! created, 405 not booted / wrong state; `vm.restore` 404 when a VM exists), the schemas'
//! required fields and enums; error bodies are a JSON array of messages as
//! `vmm/src/api/http/mod.rs` `error_response` sends them, with the status its
//! `api_error_status_code` picks (config validation 400, anything else 500); a snapshot of a
//! running VM fails as `vmm/src/vm.rs` fails it ("Trying to snapshot while VM is running").
//!
//! `vm.snapshot` writes `config.json` (the VmConfig), `state.json` and `memory-ranges` into
//! the `file://` directory, as Cloud Hypervisor does; `vm.restore` reads them back and opens
//! the disks the config names.

use crate::http::{Handler, Req, Resp, schema};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// `VmState`, plus no VM at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    None,
    Created,
    Running,
    Paused,
    Shutdown,
}

#[derive(Debug)]
pub(crate) struct Ch {
    pub(crate) state: State,
    pub(crate) config: Option<Value>,
    /// Whether `vmm.shutdown` was called.
    pub(crate) vmm_shut_down: bool,
    pub(crate) calls: Vec<String>,
}

/// The fake; clone it to look inside while it serves.
#[derive(Debug, Clone)]
pub(crate) struct FakeCloudHypervisor(pub(crate) Arc<Mutex<Ch>>);

fn err(status: u16, chain: &[&str]) -> Resp {
    (status, serde_json::to_vec(chain).unwrap())
}

fn bad(e: String) -> Resp {
    // HttpError::SerdeJsonDeserialize → 400.
    (
        400,
        serde_json::to_vec(&[format!("Error deserializing JSON: {e}")]).unwrap(),
    )
}

fn invalid(e: String) -> Resp {
    // VmError::ConfigValidation → 400.
    (
        400,
        serde_json::to_vec(&[
            "Error from API".to_string(),
            "The VM could not be created".into(),
            format!("Error validating configuration: {e}"),
        ])
        .unwrap(),
    )
}

fn exists(p: &str) -> bool {
    std::path::Path::new(p).exists()
}

/// Checks a `VmConfig` against the schema and Cloud Hypervisor's validation.
fn validate(c: &Value) -> Result<(), Resp> {
    schema::object(c, &["payload"], &[]).map_err(bad)?;
    let p = &c["payload"];
    schema::object(
        p,
        &[],
        &[
            "firmware",
            "kernel",
            "cmdline",
            "initramfs",
            "igvm",
            "host_data",
        ],
    )
    .map_err(bad)?;
    if p.get("kernel").is_none() && p.get("firmware").is_none() && p.get("igvm").is_none() {
        return Err(invalid(
            "a kernel, firmware or IGVM payload is required".into(),
        ));
    }
    for key in ["kernel", "initramfs"] {
        if let Some(f) = p.get(key).and_then(Value::as_str)
            && !exists(f)
        {
            return Err(invalid(format!("cannot open the {key} {f}")));
        }
    }
    if let Some(cpus) = c.get("cpus") {
        schema::object(cpus, &["boot_vcpus", "max_vcpus"], &[]).map_err(bad)?;
        schema::range(cpus, "boot_vcpus", 1, 255).map_err(invalid)?;
        schema::range(cpus, "max_vcpus", 1, 255).map_err(invalid)?;
        if cpus["boot_vcpus"].as_i64() > cpus["max_vcpus"].as_i64() {
            return Err(invalid("max CPUs lower than boot CPUs".into()));
        }
    }
    if let Some(m) = c.get("memory") {
        schema::object(m, &["size"], &[]).map_err(bad)?;
        schema::typed(m, "size", "integer").map_err(bad)?;
    }
    for d in c
        .get("disks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        schema::one_of(
            d,
            "image_type",
            &["FixedVhd", "Qcow2", "Raw", "Vhdx", "Unknown"],
        )
        .map_err(bad)?;
        schema::one_of(d, "lock_granularity", &["ByteRange", "Full"]).map_err(bad)?;
        schema::typed(d, "readonly", "boolean").map_err(bad)?;
        schema::typed(d, "path", "string").map_err(bad)?;
    }
    for key in ["serial", "console"] {
        if let Some(s) = c.get(key) {
            schema::object(s, &["mode"], &[]).map_err(bad)?;
            schema::one_of(s, "mode", &["Off", "Pty", "Tty", "File", "Socket", "Null"])
                .map_err(bad)?;
            if s["mode"] == "File" && s.get("file").is_none() {
                return Err(invalid(format!("{key} mode File needs a file")));
            }
        }
    }
    if let Some(v) = c.get("vsock") {
        schema::object(v, &["cid", "socket"], &[]).map_err(bad)?;
        schema::range(v, "cid", 3, i64::MAX).map_err(invalid)?;
    }
    Ok(())
}

impl FakeCloudHypervisor {
    pub(crate) fn new() -> FakeCloudHypervisor {
        FakeCloudHypervisor(Arc::new(Mutex::new(Ch {
            state: State::None,
            config: None,
            vmm_shut_down: false,
            calls: Vec::new(),
        })))
    }

    pub(crate) fn handler(&self) -> Handler {
        let me = self.clone();
        Arc::new(move |req| me.handle(req))
    }

    pub(crate) fn state(&self) -> State {
        self.0.lock().unwrap().state
    }

    fn handle(&self, req: Req) -> Resp {
        let mut ch = self.0.lock().unwrap();
        ch.calls.push(format!("{} {}", req.method, req.path));
        let Some(op) = req.path.strip_prefix("/api/v1/") else {
            return err(404, &["Not Found"]);
        };
        let ok = (204, Vec::new());
        let body = req.json();
        match (req.method.as_str(), op) {
            ("GET", "vmm.ping") => (
                200,
                json!({"version": "fake", "pid": std::process::id()})
                    .to_string()
                    .into_bytes(),
            ),
            ("PUT", "vmm.shutdown") => {
                ch.vmm_shut_down = true;
                ok
            }
            ("GET", "vm.info") => match ch.state {
                State::None => err(
                    404,
                    &[
                        "Error from API",
                        "The VM info is not available",
                        "The VM is not created",
                    ],
                ),
                s => (
                    200,
                    json!({"config": ch.config, "state": format!("{s:?}")})
                        .to_string()
                        .into_bytes(),
                ),
            },
            ("PUT", "vm.create") => {
                let Some(c) = body else {
                    return bad("EOF while parsing a value".into());
                };
                if ch.state != State::None {
                    return err(
                        500,
                        &[
                            "Error from API",
                            "The VM could not be created",
                            "The VM is already created",
                        ],
                    );
                }
                if let Err(r) = validate(&c) {
                    return r;
                }
                ch.config = Some(c);
                ch.state = State::Created;
                ok
            }
            ("PUT", "vm.boot") => match ch.state {
                State::None => err(
                    404,
                    &[
                        "Error from API",
                        "The VM could not boot",
                        "The VM is not created",
                    ],
                ),
                State::Created | State::Shutdown => {
                    ch.state = State::Running;
                    ok
                }
                _ => err(
                    500,
                    &[
                        "Error from API",
                        "The VM could not boot",
                        "Invalid VM state transition",
                    ],
                ),
            },
            ("PUT", "vm.pause") => match ch.state {
                State::None => err(
                    404,
                    &[
                        "Error from API",
                        "The VM could not be paused",
                        "The VM is not created",
                    ],
                ),
                State::Running => {
                    ch.state = State::Paused;
                    ok
                }
                _ => err(
                    405,
                    &[
                        "Error from API",
                        "The VM could not be paused",
                        "The VM is not booted",
                    ],
                ),
            },
            ("PUT", "vm.resume") => match ch.state {
                State::None => err(
                    404,
                    &[
                        "Error from API",
                        "The VM could not resume",
                        "The VM is not created",
                    ],
                ),
                State::Paused => {
                    ch.state = State::Running;
                    ok
                }
                _ => err(
                    405,
                    &[
                        "Error from API",
                        "The VM could not resume",
                        "The VM is not paused",
                    ],
                ),
            },
            ("PUT", "vm.shutdown") => match ch.state {
                State::None => err(
                    404,
                    &[
                        "Error from API",
                        "The VM could not shutdown",
                        "The VM is not created",
                    ],
                ),
                State::Running | State::Paused => {
                    ch.state = State::Shutdown;
                    ok
                }
                _ => err(
                    405,
                    &[
                        "Error from API",
                        "The VM could not shutdown",
                        "The VM is not booted",
                    ],
                ),
            },
            // VmSnapshotConfig; the VM must be booted (405) and paused.
            ("PUT", "vm.snapshot") => {
                let Some(b) = body else {
                    return bad("EOF while parsing a value".into());
                };
                if let Err(e) = schema::object(&b, &[], &["destination_url"]) {
                    return bad(e);
                }
                match ch.state {
                    State::None => {
                        return err(
                            404,
                            &[
                                "Error from API",
                                "The VM could not be snapshotted",
                                "The VM is not created",
                            ],
                        );
                    }
                    State::Created | State::Shutdown => {
                        return err(
                            405,
                            &[
                                "Error from API",
                                "The VM could not be snapshotted",
                                "The VM is not booted",
                            ],
                        );
                    }
                    State::Running => {
                        return err(
                            500,
                            &[
                                "Error from API",
                                "The VM could not be snapshotted",
                                "Snapshot error",
                                "Trying to snapshot while VM is running",
                            ],
                        );
                    }
                    State::Paused => {}
                }
                let Some(dir) = b
                    .get("destination_url")
                    .and_then(Value::as_str)
                    .and_then(|u| u.strip_prefix("file://"))
                else {
                    return err(
                        500,
                        &[
                            "Error from API",
                            "The VM could not be snapshotted",
                            "Unsupported or missing destination URL",
                        ],
                    );
                };
                let written = std::fs::write(
                    format!("{dir}/config.json"),
                    ch.config.clone().unwrap_or_default().to_string(),
                )
                .and_then(|()| std::fs::write(format!("{dir}/state.json"), b"{\"fake\":true}"))
                .and_then(|()| std::fs::write(format!("{dir}/memory-ranges"), vec![0u8; 4096]));
                if let Err(e) = written {
                    return err(
                        500,
                        &[
                            "Error from API",
                            "The VM could not be snapshotted",
                            &e.to_string(),
                        ],
                    );
                }
                ok
            }
            // RestoreConfig: required source_url; only before any VM exists.
            ("PUT", "vm.restore") => {
                let Some(b) = body else {
                    return bad("EOF while parsing a value".into());
                };
                if let Err(e) = schema::object(
                    &b,
                    &["source_url"],
                    &[
                        "source_url",
                        "prefault",
                        "memory_restore_mode",
                        "resume",
                        "zone_updates",
                    ],
                ) {
                    return bad(e);
                }
                if let Err(e) = schema::one_of(&b, "memory_restore_mode", &["Copy", "OnDemand"]) {
                    return bad(e);
                }
                if ch.state != State::None {
                    return err(
                        404,
                        &[
                            "Error from API",
                            "The VM could not be restored",
                            "The VM is already created",
                        ],
                    );
                }
                let Some(dir) = b["source_url"]
                    .as_str()
                    .and_then(|u| u.strip_prefix("file://"))
                else {
                    return err(
                        400,
                        &[
                            "Error from API",
                            "The VM could not be restored",
                            "Unsupported or missing source URL",
                        ],
                    );
                };
                let config = std::fs::read(format!("{dir}/config.json"))
                    .ok()
                    .and_then(|c| serde_json::from_slice::<Value>(&c).ok());
                let Some(config) = config else {
                    return err(
                        500,
                        &[
                            "Error from API",
                            "The VM could not be restored",
                            "Cannot read config.json",
                        ],
                    );
                };
                if !exists(&format!("{dir}/state.json")) || !exists(&format!("{dir}/memory-ranges"))
                {
                    return err(
                        500,
                        &[
                            "Error from API",
                            "The VM could not be restored",
                            "Missing state.json or memory-ranges",
                        ],
                    );
                }
                for d in config
                    .get("disks")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let p = d["path"].as_str().unwrap_or_default();
                    if !exists(p) {
                        return err(
                            500,
                            &[
                                "Error from API",
                                "The VM could not be restored",
                                &format!("Cannot open disk path {p}"),
                            ],
                        );
                    }
                }
                ch.config = Some(config);
                ch.state = if b.get("resume") == Some(&json!(true)) {
                    State::Running
                } else {
                    State::Paused
                };
                ok
            }
            _ => err(404, &["Not Found"]),
        }
    }
}
