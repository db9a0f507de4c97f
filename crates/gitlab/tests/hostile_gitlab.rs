//! A GitLab (or something in front of it) that answers what no GitLab sends: an endless job
//! payload, one that is not UTF-8, an artifact archive larger than announced. Each is a
//! failure of that one call, read within a bound; never the manager's memory.
//!
//! The server here is a plain TCP listener on loopback writing raw HTTP/1.1, so that it can
//! send what a well-behaved server library would refuse to.

use crate::runner_support;

use flotilla_gitlab::{Client, ClientError, JobRequestOutcome, MAX_JOB_PAYLOAD};
use runner_support::*;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// How a connection is answered after the request is read.
#[derive(Clone, Copy)]
enum Answer {
    /// `201` with a JSON start, then filler bytes for ever.
    EndlessJob,
    /// `201` with a payload whose variable value is not UTF-8.
    NotUtf8Job,
    /// `200` to an artifact download, announcing no length and sending for ever.
    EndlessArchive,
}

async fn serve(answer: Answer) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                // Read the request head and whatever body came with it.
                let mut buf = vec![0u8; 64 * 1024];
                let _ = tokio::time::timeout(Duration::from_millis(300), s.read(&mut buf)).await;
                let status = match answer {
                    Answer::NotUtf8Job => return not_utf8(&mut s).await,
                    Answer::EndlessJob => "201 Created",
                    Answer::EndlessArchive => "200 OK",
                };
                endless(&mut s, status).await;
            });
        }
    });
    url
}

/// A `201` whose variable value is not UTF-8.
async fn not_utf8(s: &mut tokio::net::TcpStream) {
    let mut body =
        br#"{"id":4242,"token":"glcbt-utf8-job-token","variables":[{"key":"X","value":""#.to_vec();
    body.extend_from_slice(&[0xff, 0xfe, b'x']);
    body.extend_from_slice(br#""}]}"#);
    let head = format!(
        "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let _ = s.write_all(head.as_bytes()).await;
    let _ = s.write_all(&body).await;
}

/// `status` with a chunked body that starts as a job payload and never ends, until the
/// client hangs up.
async fn endless(s: &mut tokio::net::TcpStream, status: &str) {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let chunk = |data: &[u8]| {
        let mut c = format!("{:x}\r\n", data.len()).into_bytes();
        c.extend_from_slice(data);
        c.extend_from_slice(b"\r\n");
        c
    };
    let start = br#"{"id":777,"token":"glcbt-endless-job","variables":[{"key":"A","value":""#;
    if s.write_all(head.as_bytes()).await.is_err() || s.write_all(&chunk(start)).await.is_err() {
        return;
    }
    let filler = chunk(&vec![b'a'; 256 * 1024]);
    while s.write_all(&filler).await.is_ok() {}
}

fn client_for(url: &str) -> Client {
    Client::new(client_config(url, RUNNER_TOKEN)).unwrap()
}

#[tokio::test]
async fn an_endless_job_payload_is_read_up_to_its_limit_and_the_job_can_still_be_failed() {
    let url = serve(Answer::EndlessJob).await;
    let c = client_for(&url);
    let outcome = tokio::time::timeout(Duration::from_secs(60), c.request_job())
        .await
        .expect("the read ends")
        .unwrap();
    let JobRequestOutcome::Job(job) = outcome else {
        panic!("{outcome:?}");
    };
    // Enough was read to report the job: its id and token come first.
    assert_eq!(job.id, Some(777));
    assert_eq!(
        job.token.as_ref().map(|t| t.expose().as_str()),
        Some("glcbt-endless-job")
    );
    let err = job.payload.as_ref().unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("larger than {} MiB", MAX_JOB_PAYLOAD >> 20)),
        "{err}"
    );
}

#[tokio::test]
async fn a_payload_that_is_not_utf8_still_gives_its_id_and_token() {
    let url = serve(Answer::NotUtf8Job).await;
    let c = client_for(&url);
    let JobRequestOutcome::Job(job) = c.request_job().await.unwrap() else {
        panic!("no job");
    };
    assert_eq!(job.id, Some(4242));
    assert_eq!(
        job.token.as_ref().map(|t| t.expose().as_str()),
        Some("glcbt-utf8-job-token")
    );
    assert!(job.payload.is_err());
}

#[tokio::test]
async fn an_archive_past_its_announced_size_is_refused_and_nothing_is_kept() {
    let url = serve(Answer::EndlessArchive).await;
    let c = client_for(&url);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("a.zip");
    let token = flotilla_fleet::Secret::new("glcbt-x".to_string());
    let err = tokio::time::timeout(
        Duration::from_secs(60),
        c.download_artifacts(9, &token, &dest, 4 << 20),
    )
    .await
    .expect("the download ends")
    .unwrap_err();
    assert!(
        matches!(err, ClientError::TooLarge { limit, .. } if limit == 4 << 20),
        "{err}"
    );
    assert!(
        err.to_string().contains("larger than 4194304 bytes"),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}
