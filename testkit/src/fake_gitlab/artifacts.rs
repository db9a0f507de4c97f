//! Artifacts: `POST /api/v4/jobs/:id/artifacts` (upload) and `GET /api/v4/jobs/:id/artifacts`
//! (download), plus the object-storage URL downloads may be redirected to.
//!
//! Sources: Rails' `lib/api/ci/runner.rb` (`post '/:id/artifacts'`, `get '/:id/artifacts'`,
//! `authenticate_job_via_dependent_job!` in `lib/api/ci/helpers/runner.rb`),
//! `app/services/ci/job_artifacts/create_service.rb` (a second upload of a type is accepted
//! only with the same content, "another artifact of the same type already exists"),
//! `app/models/concerns/enums/ci/job_artifact.rb` (types and their formats).

use super::server::{Request, Resp, Server, error, query_param, respond};
use super::state::UploadedArtifact;
use bytes::Bytes;
use http_body_util::Full;
use std::io::Read;

/// `Enums::Ci::JobArtifact.type_and_format_pairs` (a subset: the internal types and the
/// report types tests use); an upload with another pairing is refused.
fn expected_format(artifact_type: &str) -> Option<&'static str> {
    Some(match artifact_type {
        "archive" => "zip",
        "metadata" => "gzip",
        "trace" => "raw",
        "lsif" | "scip" => "zip",
        "junit" | "metrics" | "dotenv" | "cobertura" | "jacoco" | "cyclonedx" | "annotations"
        | "repository_xray" => "gzip",
        "sast"
        | "secret_detection"
        | "dependency_scanning"
        | "container_scanning"
        | "cluster_image_scanning"
        | "dast"
        | "license_scanning"
        | "accessibility"
        | "codequality"
        | "performance"
        | "browser_performance"
        | "load_performance"
        | "terraform"
        | "requirements"
        | "requirements_v2"
        | "coverage_fuzzing"
        | "api_fuzzing"
        | "sarif" => "raw",
        _ => return None,
    })
}

/// The variables of a gzip `dotenv` report as Rails' `Ci::ParseDotenvArtifactService` reads
/// it: every line `KEY=VALUE` (`/^(.*?)=(.*)$/`, both sides stripped; a blank line does not
/// match), a later key replacing an earlier one, at most 20 variables and 5 KB (the default
/// plan limits); `None` when it breaks a rule (Rails answers 400).
fn parse_dotenv(data: &[u8]) -> Option<Vec<(String, String)>> {
    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(data)
        .read_to_string(&mut text)
        .ok()?;
    if text.len() >= 5 * 1024 {
        return None;
    }
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.split_inclusive('\n') {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let (k, v) = line.split_once('=')?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() {
            return None;
        }
        match out.iter_mut().find(|(key, _)| key == k) {
            Some(slot) => slot.1 = v.to_string(),
            None => out.push((k.to_string(), v.to_string())),
        }
    }
    (out.len() <= 20).then_some(out)
}

/// `POST /api/v4/jobs/:id/artifacts`.
pub(crate) async fn upload(server: &Server, id: i64, req: &Request<'_>, body: Bytes) -> Resp {
    let token = query_param(req.query, "token")
        .or_else(|| req.header("job-token").map(String::from))
        .unwrap_or_default();
    {
        let d = server.lock();
        let Some(job) = d.jobs.get(&id) else {
            return error(403, "403 Forbidden");
        };
        if job.token != token {
            return error(403, "403 Forbidden");
        }
        if !job.state.is_active() {
            return respond(403)
                .header("job-status", job.state.as_str())
                .body(Full::new(Bytes::new()))
                .unwrap_or_default();
        }
    }
    let artifact_type = query_param(req.query, "artifact_type").unwrap_or_else(|| "archive".into());
    let artifact_format = query_param(req.query, "artifact_format").unwrap_or_else(|| "zip".into());
    let Some(expected) = expected_format(&artifact_type) else {
        return error(
            400,
            "400 Bad request - artifact_type does not have a valid value",
        );
    };
    if !matches!(artifact_format.as_str(), "raw" | "zip" | "gzip") {
        return error(
            400,
            "400 Bad request - artifact_format does not have a valid value",
        );
    }
    if expected != artifact_format {
        return error(400, "Invalid file format with specified file type");
    }
    let Some(boundary) = req
        .header("content-type")
        .and_then(|ct| multer::parse_boundary(ct).ok())
    else {
        return error(400, "400 Bad request - file is missing");
    };
    let stream = futures::stream::once(async move { Ok::<Bytes, std::io::Error>(body) });
    let mut multipart = multer::Multipart::new(stream, boundary);
    let mut file = None;
    loop {
        match multipart.next_field().await {
            Ok(Some(field)) => {
                if field.name() == Some("file") {
                    let name = field.file_name().unwrap_or("").to_string();
                    match field.bytes().await {
                        Ok(b) => file = Some((name, b.to_vec())),
                        Err(e) => return error(400, &format!("reading part file: {e}")),
                    }
                }
            }
            Ok(None) => break,
            Err(e) => return error(400, &format!("multipart: {e}")),
        }
    }
    let Some((filename, data)) = file else {
        return error(400, "400 Bad request - file is missing");
    };
    let dotenv = if artifact_type == "dotenv" {
        match parse_dotenv(&data) {
            Some(v) => v,
            None => return error(400, "Invalid Format"),
        }
    } else {
        Vec::new()
    };
    let artifact = UploadedArtifact {
        filename,
        artifact_type,
        artifact_format,
        expire_in: query_param(req.query, "expire_in").unwrap_or_default(),
        data,
        dotenv,
    };
    let mut d = server.lock();
    let Some(job) = d.jobs.get_mut(&id) else {
        return error(403, "403 Forbidden");
    };
    if let Some(existing) = job
        .artifacts
        .iter()
        .find(|a| a.artifact_type == artifact.artifact_type)
    {
        // `sha256_matches_existing_artifact?`: the same file again (a retried upload whose
        // answer was lost) succeeds; another one is refused.
        if existing.data != artifact.data {
            return error(400, "another artifact of the same type already exists");
        }
    } else {
        job.artifacts.push(artifact);
    }
    respond(201)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"201")))
        .unwrap_or_default()
}

/// `GET /api/v4/jobs/:id/artifacts`: authorised by the token of a job that is running
/// (`authenticate_job_via_dependent_job!`; a finished job's token no longer authenticates,
/// so the dependency's own token fails), 404 without an archive. With object storage and
/// `direct_download=true` it redirects to the storage URL; otherwise Workhorse serves it.
pub(crate) fn download(server: &Server, id: i64, req: &Request<'_>) -> Resp {
    let token = query_param(req.query, "token")
        .or_else(|| req.header("job-token").map(String::from))
        .unwrap_or_default();
    let direct = query_param(req.query, "direct_download").is_some_and(|v| v == "true");
    let d = server.lock();
    if d.active_job_by_token(&token).is_none() {
        return error(401, "401 Unauthorized");
    }
    let Some(job) = d.jobs.get(&id) else {
        return error(403, "403 Forbidden");
    };
    let Some(archive) = job.artifacts.iter().find(|a| a.artifact_type == "archive") else {
        return error(404, "404 Not Found");
    };
    if direct && d.behaviour.object_storage {
        return respond(302)
            .header(
                "location",
                format!(
                    "{}/_storage/jobs/{id}/artifacts?X-Amz-Signature=fake-signature",
                    d.other_origin
                ),
            )
            .body(Full::new(Bytes::new()))
            .unwrap_or_default();
    }
    respond(200)
        .header("content-type", "application/zip")
        .body(Full::new(Bytes::from(archive.data.clone())))
        .unwrap_or_default()
}

/// The object-storage URL: a pre-signed URL needs no token.
pub(crate) fn from_storage(server: &Server, id: i64) -> Resp {
    let d = server.lock();
    match d
        .jobs
        .get(&id)
        .and_then(|j| j.artifacts.iter().find(|a| a.artifact_type == "archive"))
    {
        Some(a) => respond(200)
            .header("content-type", "application/zip")
            .body(Full::new(Bytes::from(a.data.clone())))
            .unwrap_or_default(),
        None => error(404, "404 Not Found"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn dotenv_reports_parse_like_rails() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(b"VERSION=1.0\nURL = https://x/?a=b \nVERSION=1.2\n")
            .unwrap();
        let data = gz.finish().unwrap();
        assert_eq!(
            parse_dotenv(&data).unwrap(),
            vec![
                ("VERSION".to_string(), "1.2".to_string()),
                ("URL".to_string(), "https://x/?a=b".to_string())
            ]
        );
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(b"not a pair\n").unwrap();
        assert!(parse_dotenv(&gz.finish().unwrap()).is_none());
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(b"A=1\n\nB=2\n").unwrap();
        assert!(
            parse_dotenv(&gz.finish().unwrap()).is_none(),
            "a blank line"
        );
        assert_eq!(expected_format("junit"), Some("gzip"));
        assert_eq!(expected_format("codequality"), Some("raw"));
    }
}
