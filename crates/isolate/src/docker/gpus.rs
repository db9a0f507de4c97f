//! `gpus` and `service_gpus`: GPU requests as `docker run --gpus` reads them, which is how
//! GitLab Runner reads the keys (`bindDeviceRequests` hands the string to the Docker CLI's
//! `opts.GpuOpts.Set`). Pure.
//!
//! The value is one CSV record: `all`, a count (`2`), or `key=value` fields among `count`
//! (a number or `all`), `device` (ids, comma-separated, so the field is quoted:
//! `"device=0,1"`), `capabilities` (`gpu` is always added), `driver` and `options` (a quoted
//! CSV of `k=v`). Without a count or devices, one GPU is asked for.

use bollard::models::DeviceRequest;
use std::collections::HashMap;

/// Why a GPU request does not parse, in the Docker CLI's words where it has them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct GpuError(String);

/// The device request `value` makes; `None` for an empty value.
pub fn parse(value: &str) -> Result<Option<DeviceRequest>, GpuError> {
    if value.trim().is_empty() {
        return Ok(None);
    }
    let fields = csv_record(value)?;
    let mut request = DeviceRequest::default();
    let mut seen: Vec<String> = Vec::new();
    for field in fields {
        let (key, val) = match field.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (field.clone(), None),
        };
        if seen.contains(&key) {
            return Err(GpuError(format!(
                "gpu request key '{key}' can be specified only once"
            )));
        }
        seen.push(key.clone());
        let Some(val) = val else {
            seen.push("count".into());
            request.count = Some(count(&key)?);
            continue;
        };
        match key.as_str() {
            "driver" => request.driver = Some(val),
            "count" => request.count = Some(count(&val)?),
            "device" => request.device_ids = Some(val.split(',').map(str::to_string).collect()),
            "capabilities" => {
                let mut caps: Vec<String> = val.split(',').map(str::to_string).collect();
                caps.push("gpu".into());
                request.capabilities = Some(vec![caps]);
            }
            "options" => {
                let options = csv_record(&val)
                    .map_err(|e| GpuError(format!("failed to read gpu options: {e}")))?;
                request.options = Some(
                    options
                        .into_iter()
                        .map(|kv| match kv.split_once('=') {
                            Some((k, v)) => (k.to_string(), v.to_string()),
                            None => (kv, String::new()),
                        })
                        .collect(),
                );
            }
            _ => {
                return Err(GpuError(format!("unexpected key '{key}' in '{field}'")));
            }
        }
    }
    if !seen.iter().any(|k| k == "count") && request.device_ids.is_none() {
        request.count = Some(1);
    }
    request.options.get_or_insert_with(HashMap::new);
    request
        .capabilities
        .get_or_insert_with(|| vec![vec!["gpu".into()]]);
    Ok(Some(request))
}

fn count(s: &str) -> Result<i64, GpuError> {
    if s == "all" {
        return Ok(-1);
    }
    s.parse()
        .map_err(|_| GpuError(format!("count must be an integer, got {s:?}")))
}

/// One record of comma-separated values as Go's `encoding/csv` reads it: a field in double
/// quotes may hold commas, and `""` inside it is one quote; a quote inside an unquoted field
/// is an error.
fn csv_record(line: &str) -> Result<Vec<String>, GpuError> {
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => {
                        return Err(GpuError("extraneous or missing \" in quoted-field".into()));
                    }
                }
            }
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => fields.push(field),
                Some(_) => return Err(GpuError("extraneous or missing \" in quoted-field".into())),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(field);
                        return Ok(fields);
                    }
                    Some(',') => {
                        fields.push(field);
                        break;
                    }
                    Some('"') => return Err(GpuError("bare \" in non-quoted-field".into())),
                    Some(c) => field.push(c),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(
        count: Option<i64>,
        devices: Option<&[&str]>,
        caps: &[&str],
        driver: Option<&str>,
    ) -> DeviceRequest {
        DeviceRequest {
            driver: driver.map(str::to_string),
            count,
            device_ids: devices.map(|d| d.iter().map(|s| s.to_string()).collect()),
            capabilities: Some(vec![caps.iter().map(|s| s.to_string()).collect()]),
            options: Some(HashMap::new()),
        }
    }

    /// The Docker CLI's own cases (`opts/gpus_test.go`).
    #[test]
    fn as_docker_run_reads_them() {
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(
            parse("all").unwrap(),
            Some(request(Some(-1), None, &["gpu"], None))
        );
        assert_eq!(
            parse("2").unwrap(),
            Some(request(Some(2), None, &["gpu"], None))
        );
        assert_eq!(
            parse("\"device=1,3\"").unwrap(),
            Some(request(None, Some(&["1", "3"]), &["gpu"], None))
        );
        assert_eq!(
            parse("driver=nvidia,\"capabilities=compute,utility\"").unwrap(),
            Some(request(
                Some(1),
                None,
                &["compute", "utility", "gpu"],
                Some("nvidia")
            ))
        );
        let with_options = parse("count=1,\"options=a=b,c=d\"").unwrap().unwrap();
        assert_eq!(
            with_options.options.unwrap(),
            HashMap::from([("a".into(), "b".into()), ("c".into(), "d".into())])
        );
        for bad in [
            "count=many",
            "count=1,count=2",
            "speed=fast",
            "device=\"0\"",
            "\"all",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
