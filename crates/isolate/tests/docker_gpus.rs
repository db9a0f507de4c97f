//! `gpus` and `service_gpus` judged by the Docker CLI: for each value, the device request
//! flotilla makes is the one `docker create --gpus <value>` stores on this host's engine
//! (creating a container needs no GPU; only starting it would), and a value the CLI refuses
//! flotilla refuses too.

use flotilla_isolate::docker::gpus;
use flotilla_testkit::images::busybox_image;
use flotilla_testkit::infra::{Infra, require};
use std::process::Command;

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("the docker CLI runs")
}

/// What `docker create --gpus value` stored, or the CLI's refusal.
fn docker_request(image: &str, value: &str) -> Result<serde_json::Value, String> {
    let created = docker(&["create", "--gpus", value, image, "true"]);
    if !created.status.success() {
        return Err(String::from_utf8_lossy(&created.stderr).into_owned());
    }
    let id = String::from_utf8_lossy(&created.stdout).trim().to_string();
    let inspect = docker(&[
        "inspect",
        "--format",
        "{{json .HostConfig.DeviceRequests}}",
        &id,
    ]);
    docker(&["rm", "-f", &id]);
    let requests: serde_json::Value =
        serde_json::from_slice(&inspect.stdout).expect("inspect prints JSON");
    Ok(requests[0].clone())
}

/// A request in the engine's JSON, with Go's zero values where a field is unset.
fn normalized(v: &serde_json::Value) -> serde_json::Value {
    let or = |key: &str, zero: serde_json::Value| match &v[key] {
        serde_json::Value::Null => zero,
        other => other.clone(),
    };
    serde_json::json!({
        "Driver": or("Driver", serde_json::json!("")),
        "Count": or("Count", serde_json::json!(0)),
        "DeviceIDs": or("DeviceIDs", serde_json::Value::Null),
        "Capabilities": or("Capabilities", serde_json::Value::Null),
        "Options": or("Options", serde_json::json!({})),
    })
}

#[test]
fn infra_docker_gpu_requests_are_the_ones_docker_run_makes() {
    if !require(Infra::Docker) {
        return;
    }
    let image = busybox_image();
    for value in [
        "all",
        "2",
        "\"device=0,2\"",
        "driver=nvidia,\"capabilities=compute,utility\",count=1",
        "count=all,\"options=mode=fast,b=c\"",
        "device=GPU-3a23c669",
        "driver=nvidia",
        "\"capabilities=compute,video\"",
    ] {
        let ours = gpus::parse(value)
            .unwrap_or_else(|e| panic!("{value}: {e}"))
            .expect("a request");
        let ours = serde_json::to_value(&ours).unwrap();
        let theirs = docker_request(&image, value).unwrap_or_else(|e| panic!("{value}: {e}"));
        assert_eq!(normalized(&ours), normalized(&theirs), "--gpus {value}");
    }
    for bad in [
        "count=many",
        "speed=fast",
        "count=1,count=2",
        "device=\"0\"",
    ] {
        assert!(gpus::parse(bad).is_err(), "flotilla takes {bad}");
        assert!(
            docker_request(&image, bad).is_err(),
            "the CLI takes {bad}: the case says nothing"
        );
    }
}
