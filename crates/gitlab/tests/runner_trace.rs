//! The job log on the wire: PATCH ranges, 1 MiB chunks, 416 recovery after lost answers,
//! keep-alives of silent jobs, `debug_trace`, and the final update: the 202 loop on Rails'
//! backoff, failures counted and backed off, every PATCH accepted before the PUT, the 412
//! reset of older GitLab.

use crate::runner_support;

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
    run.await.unwrap();
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
        [const { Scripted::Fault(FaultKind::DropAfter) }; 2],
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
    run.await.unwrap();
}

/// With live trace on, Rails answers final updates 202 while the log's chunks are persisted,
/// with `backoff.rb`'s interval in `X-GitLab-Trace-Update-Interval` (1 s, then `1/2` between
/// one and two seconds, then 1 s again ...). A 202 is not a failure: with room for a single
/// failed attempt, the update still goes through after several 202s.
#[tokio::test]
async fn the_final_update_repeats_while_gitlab_answers_202_without_using_up_attempts() {
    let fake = fake()
        .live_trace(Duration::from_secs(3))
        .start()
        .await
        .unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let mut config = source_config();
    config.trace.final_update_attempts = 1;
    let (source, run) = spawn_source(client(&fake), exec.clone(), config);
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
    let statuses: Vec<u16> = finals.iter().map(|r| r.status).collect();
    assert!(statuses.len() >= 3, "{statuses:?}");
    assert_eq!(statuses.last(), Some(&200), "{statuses:?}");
    assert!(statuses[..statuses.len() - 1].iter().all(|s| *s == 202));
    let intervals: Vec<&str> = finals
        .iter()
        .filter_map(|r| r.response_header("x-gitlab-trace-update-interval"))
        .collect();
    assert_eq!(intervals[0], "1", "{intervals:?}");
    // The wait follows the header each time (a half second once).
    for (w, r) in finals.windows(2).zip(&finals) {
        let asked = match r.response_header("x-gitlab-trace-update-interval") {
            Some("1/2") => Duration::from_millis(450),
            _ => Duration::from_millis(950),
        };
        assert!(
            w[1].at - w[0].at >= asked,
            "{:?} after {:?}",
            w[1].at - w[0].at,
            asked
        );
    }
    assert!(finals.last().unwrap().at - finals[0].at >= Duration::from_millis(2900));
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Success);
    assert_eq!(j.final_updates, 1);
    assert!(j.final_update.unwrap().trace_matched);
    source.stop_handle().graceful();
    let report = run.await.unwrap();
    assert_eq!(report.final_updates_given_up, 0);
}

/// A 202 without an interval header is repeated after `backoff.rb`'s schedule (1 s at
/// first), not at once and not after the client's own failure backoff (20 ms here).
#[tokio::test]
async fn a_bare_202_is_repeated_on_rails_backoff_schedule() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), source_config());
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("j").script(["echo started", "sleep 1", "echo done"]),
    );
    wait_for_accept(&fake, id).await;
    fake.script(
        "PUT",
        &format!("/api/v4/jobs/{id}"),
        [const {
            Scripted::Status {
                status: 202,
                retry_after: None,
            }
        }; 2],
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
    // 1 s after the first 202; then `2 ** -1`, half a second, between one and two seconds.
    assert!(finals[1].at - finals[0].at >= Duration::from_millis(950));
    assert!(finals[2].at - finals[1].at >= Duration::from_millis(450));
    source.stop_handle().graceful();
    run.await.unwrap();
}

/// Only failures count toward the attempts, and each waits longer than the one before; once
/// they are used up the job's final update is given up (and reported so).
#[tokio::test]
async fn final_update_failures_back_off_and_are_counted() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let mut config = source_config();
    config.trace.final_update_attempts = 3;
    let (source, run) = spawn_source(client(&fake), exec.clone(), config);
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("j").script(["echo started", "sleep 1"]),
    );
    wait_for_accept(&fake, id).await;
    // Every PUT answered 500: five tries per attempt inside the client, three attempts.
    fake.script(
        "PUT",
        &format!("/api/v4/jobs/{id}"),
        [const {
            Scripted::Status {
                status: 500,
                retry_after: None,
            }
        }; 15],
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let report = source.report();
        if report.final_updates_given_up == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never gave up: {report:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let finals = fake.requests_to("PUT", &format!("/api/v4/jobs/{id}"));
    let finals: Vec<_> = finals
        .iter()
        .filter(|r| r.json().unwrap()["state"] == "success")
        .collect();
    assert_eq!(finals.len(), 15, "3 attempts of 5 tries");
    assert!(finals.iter().all(|r| r.status == 500));
    assert!(fake.job(id).unwrap().final_update.is_none());
    source.stop_handle().graceful();
    run.await.unwrap();
}

/// The final PUT goes out only once GitLab accepted every byte of the log: a PATCH that
/// fails first is retried (counting as a failed attempt), and the PUT's size is what GitLab
/// holds.
#[tokio::test]
async fn the_final_update_waits_for_every_patch_to_be_accepted() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), source_config());
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("j").script(["echo started", "sleep 0.5", "echo the end"]),
    );
    fake.script(
        "PATCH",
        &format!("/api/v4/jobs/{id}/trace"),
        [const {
            Scripted::Status {
                status: 502,
                retry_after: None,
            }
        }; 7],
    );
    assert!(fake.wait_finished(&[id], Duration::from_secs(60)).await);
    let j = fake.job(id).unwrap();
    assert_eq!(j.trace, exec.log(id));
    let reqs = fake.requests();
    let final_put = reqs
        .iter()
        .find(|r| r.method == "PUT" && r.json().is_some_and(|b| b["state"] == "success"))
        .unwrap();
    let last_accepted_patch = reqs
        .iter()
        .filter(|r| r.method == "PATCH" && r.status == 202)
        .map(|r| r.seq)
        .max()
        .unwrap();
    assert!(final_put.seq > last_accepted_patch);
    assert!(
        reqs.iter()
            .filter(|r| r.method == "PATCH" && r.seq > final_put.seq)
            .count()
            == 0
    );
    let f = j.final_update.unwrap();
    assert_eq!(f.bytesize, Some(j.trace.len() as u64));
    assert!(f.trace_matched);
    source.stop_handle().graceful();
    run.await.unwrap();
}

/// Older GitLab answered 412 when the trace's checksum did not match: the client sends the
/// whole log again from offset 0 (GitLab answers 416 with the size it holds, and the client
/// goes on from there), then repeats the PUT, without counting a failure.
#[tokio::test]
async fn a_412_resends_the_log_from_the_start() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let mut config = source_config();
    config.trace.final_update_attempts = 1;
    let (source, run) = spawn_source(client(&fake), exec.clone(), config);
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("j").script(["echo checked", "sleep 0.5"]),
    );
    wait_for_accept(&fake, id).await;
    fake.script(
        "PUT",
        &format!("/api/v4/jobs/{id}"),
        [Scripted::Status {
            status: 412,
            retry_after: None,
        }],
    );
    assert!(fake.wait_finished(&[id], Duration::from_secs(60)).await);
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Success);
    assert_eq!(j.trace, exec.log(id));
    let reqs = fake.requests();
    let rejected = reqs
        .iter()
        .find(|r| r.method == "PUT" && r.status == 412)
        .unwrap();
    let resent = reqs
        .iter()
        .find(|r| r.method == "PATCH" && r.seq > rejected.seq)
        .unwrap();
    assert_eq!(
        resent.header("content-range").unwrap().split('-').next(),
        Some("0")
    );
    assert_eq!(resent.status, 416);
    assert_eq!(j.final_updates, 1);
    source.stop_handle().graceful();
    run.await.unwrap();
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
    run.await.unwrap();
}

/// `debug_trace=true` goes with every PATCH whenever `CI_DEBUG_TRACE` is on as the script
/// engine reads it (`1`, `t`, `true`, any case), and GitLab marks the job's log as a debug
/// log (`AppendBuildTraceService#first_debug_chunk?`).
#[tokio::test]
async fn debug_trace_follows_ci_debug_trace_as_the_script_engine_reads_it() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(2, true).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), source_config());
    let mut ids = Vec::new();
    for (value, on) in [
        ("True", true),
        ("1", true),
        ("t", true),
        ("false", false),
        ("yes", false),
    ] {
        let id = fake.enqueue(
            RUNNER_TOKEN,
            JobBuilder::new(format!("debug-{value}"))
                .variable("CI_DEBUG_TRACE", value)
                .script(["echo hi"]),
        );
        ids.push((id, on));
    }
    let all: Vec<i64> = ids.iter().map(|(id, _)| *id).collect();
    assert!(fake.wait_finished(&all, Duration::from_secs(60)).await);
    for (id, on) in ids {
        let ps = patches(&fake, id);
        assert!(!ps.is_empty());
        let want = format!("debug_trace={on}");
        assert!(
            ps.iter().all(|p| p.query.as_deref() == Some(want.as_str())),
            "job {id}: {:?}",
            ps.iter().map(|p| p.query.clone()).collect::<Vec<_>>()
        );
        assert_eq!(fake.job(id).unwrap().debug_trace, on);
    }
    source.stop_handle().graceful();
    run.await.unwrap();
}
