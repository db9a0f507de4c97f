//! The job log on the wire: PATCH ranges, 1 MiB chunks, 416 recovery after lost answers,
//! keep-alives of silent jobs, and the final update's 202 loop and 412 reset.

mod runner_support;

use flotilla_testkit::fake_gitlab::{FakeJobState, FaultKind, JobBuilder, RecordedBody, Scripted};
use runner_support::*;
use std::time::Duration;

fn patches(
    fake: &flotilla_testkit::fake_gitlab::FakeGitLab,
    id: i64,
) -> Vec<flotilla_testkit::fake_gitlab::RecordedRequest> {
    fake.requests_to("PATCH", &format!("/api/v4/jobs/{id}/trace"))
}

#[tokio::test]
async fn patches_have_inclusive_ranges_and_at_most_one_mib() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), source_config());
    // 2.5 MiB in one burst.
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("big").script([
            "head -c 2621440 /dev/zero | tr '\\0' x",
            "echo",
            "echo done",
        ]),
    );
    assert!(fake.wait_finished(&[id], Duration::from_secs(60)).await);
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Success);
    assert_eq!(j.trace, exec.log(id));
    assert!(j.trace.len() > 2_621_440);
    let ps = patches(&fake, id);
    let mut next = 0u64;
    let mut biggest = 0;
    for p in &ps {
        assert_eq!(p.header("content-type"), Some("text/plain"));
        assert_eq!(p.header("job-token"), Some(j.token.as_str()));
        let RecordedBody::Bytes(body) = &p.body else {
            panic!("trace body recorded as {:?}", p.body)
        };
        let (start, end) = p.header("content-range").unwrap().split_once('-').unwrap();
        let (start, end): (u64, u64) = (start.parse().unwrap(), end.parse().unwrap());
        assert_eq!(start, next, "patches are consecutive");
        assert_eq!(end, start + body.len() as u64 - 1, "the end is inclusive");
        assert_eq!(p.status, 202);
        biggest = biggest.max(body.len());
        next = end + 1;
    }
    assert_eq!(next, j.trace.len() as u64);
    assert_eq!(biggest, 1024 * 1024, "1 MiB chunks");
    assert!(ps.len() >= 3);
    source.stop_handle().graceful();
    run.await.unwrap().unwrap();
}

#[tokio::test]
async fn lost_answers_are_recovered_from_the_range_of_a_416() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), source_config());
    // The first two PATCHes are applied but their answers lost: the client resends the
    // same range, gets 416 with the size GitLab holds, and continues from there.
    fake.script(
        "PATCH",
        "/api/v4/jobs/",
        [Scripted::Fault(FaultKind::DropAfter); 2],
    );
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("chatty")
            .script(["for i in $(seq 1 20); do echo line $i; sleep 0.05; done"]),
    );
    assert!(fake.wait_finished(&[id], Duration::from_secs(60)).await);
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Success);
    assert_eq!(j.trace, exec.log(id), "no byte lost or duplicated");
    let ps = patches(&fake, id);
    assert_eq!(ps.iter().filter(|p| p.status == 0).count(), 2);
    let s416: Vec<_> = ps.iter().filter(|p| p.status == 416).collect();
    assert!(
        !s416.is_empty(),
        "{:?}",
        ps.iter().map(|p| p.status).collect::<Vec<_>>()
    );
    source.stop_handle().graceful();
    run.await.unwrap().unwrap();
}

#[tokio::test]
async fn the_final_update_repeats_while_gitlab_answers_202() {
    let fake = fake()
        .persist_202s(2)
        .trace_update_interval(1)
        .start()
        .await
        .unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), source_config());
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("j").script(["echo persisted"]),
    );
    assert!(fake.wait_finished(&[id], Duration::from_secs(60)).await);
    let finals: Vec<_> = fake
        .requests_to("PUT", &format!("/api/v4/jobs/{id}"))
        .into_iter()
        .filter(|r| r.json().unwrap()["state"] == "success")
        .collect();
    assert_eq!(
        finals.iter().map(|r| r.status).collect::<Vec<_>>(),
        vec![202, 202, 200]
    );
    // The server's interval (1 s) separates the attempts.
    assert!(finals[1].at - finals[0].at >= Duration::from_millis(950));
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Success);
    assert_eq!(j.final_updates, 1);
    source.stop_handle().graceful();
    run.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_checksum_mismatch_resends_the_whole_trace() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let id = fake.enqueue(RUNNER_TOKEN, JobBuilder::new("j").script(["echo checked"]));
    fake.reject_checksum(id, 1);
    let (source, run) = spawn_source(client(&fake), exec.clone(), source_config());
    assert!(fake.wait_finished(&[id], Duration::from_secs(60)).await);
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Success);
    assert_eq!(j.trace, exec.log(id));
    let reqs = fake.requests();
    let first_final = reqs
        .iter()
        .find(|r| r.method == "PUT" && r.json().is_some_and(|b| b["state"] == "success"))
        .unwrap();
    assert_eq!(first_final.status, 412);
    let resent: Vec<_> = reqs
        .iter()
        .filter(|r| r.method == "PATCH" && r.seq > first_final.seq)
        .collect();
    assert_eq!(
        resent
            .first()
            .unwrap()
            .header("content-range")
            .unwrap()
            .split('-')
            .next(),
        Some("0")
    );
    assert_eq!(j.final_updates, 1);
    source.stop_handle().graceful();
    run.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_silent_job_sends_keep_alives_with_the_trace_checksum() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let mut config = source_config();
    config.trace.force_send_interval = Duration::from_millis(400);
    let (source, run) = spawn_source(client(&fake), exec.clone(), config);
    let id = fake.enqueue(RUNNER_TOKEN, JobBuilder::new("quiet").script(["sleep 2"]));
    assert!(fake.wait_finished(&[id], Duration::from_secs(60)).await);
    let keepalives: Vec<_> = fake
        .requests_to("PUT", &format!("/api/v4/jobs/{id}"))
        .into_iter()
        .filter(|r| {
            r.json().unwrap()["state"] == "running" && r.json().unwrap().get("output").is_some()
        })
        .collect();
    assert!(keepalives.len() >= 2, "{}", keepalives.len());
    for k in &keepalives {
        let out = &k.json().unwrap()["output"];
        assert!(out["checksum"].as_str().unwrap().starts_with("crc32:"));
        assert!(out["bytesize"].as_u64().unwrap() > 0);
    }
    source.stop_handle().graceful();
    run.await.unwrap().unwrap();
}
