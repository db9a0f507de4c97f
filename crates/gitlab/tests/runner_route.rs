//! `SlotExecutor::route`: a job the executor sends elsewhere reserves on the other
//! executor's scaler, gives its first reservation back at once, runs there with the routing's
//! notes in its log; a job the executor refuses fails as a system failure with the reason
//! in its log and runs nowhere; other jobs run as before.

use crate::runner_support;

use async_trait::async_trait;
use flotilla_gitlab::{Route, SlotExecutor, SourceConfig};
use flotilla_job::{JobCancel, JobPayload, JobResult, TraceSink};
use flotilla_scaler::{Acquisition, Scaler};
use flotilla_testkit::fake_gitlab::{FakeJobState, JobBuilder};
use runner_support::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Routes by the job's `ROUTE` variable: `other` to `other`, `refuse` nowhere.
struct Router {
    home: Arc<LocalExecutor>,
    other: Arc<LocalExecutor>,
}

#[async_trait]
impl SlotExecutor for Router {
    fn scaler(&self) -> &Scaler {
        self.home.scaler()
    }

    async fn route(&self, job: &JobPayload) -> Result<Route, String> {
        let asked = job
            .variables
            .iter()
            .find(|v| v.key == "ROUTE")
            .map(|v| v.value.as_str());
        match asked {
            Some("other") => Ok(Route {
                executor: Some(self.other.clone()),
                notes: vec!["sent to the other fleet".into()],
            }),
            Some("refuse") => Err("couldn't prepare overwrites: too big".into()),
            _ => Ok(Route::default()),
        }
    }

    async fn run(
        &self,
        acquisition: Acquisition,
        job: &JobPayload,
        sink: &mut dyn TraceSink,
        cancel: &JobCancel,
    ) -> JobResult {
        self.home.run(acquisition, job, sink, cancel).await
    }
}

/// A job source on a [`Router`] between a home fleet of `home_slots` and another of one slot,
/// running.
struct Routing {
    home: Arc<LocalExecutor>,
    other: Arc<LocalExecutor>,
    source: Arc<flotilla_gitlab::JobSource>,
    run: tokio::task::JoinHandle<flotilla_gitlab::SourceReport>,
}

async fn routing(
    fake: &flotilla_testkit::fake_gitlab::FakeGitLab,
    home_slots: usize,
    config: SourceConfig,
) -> Routing {
    let home = LocalExecutor::new(local_scaler(home_slots, false).await, None);
    let other = LocalExecutor::new(local_scaler(1, false).await, None);
    let router = Arc::new(Router {
        home: home.clone(),
        other: other.clone(),
    });
    let source = Arc::new(flotilla_gitlab::JobSource::new(
        client(fake),
        router,
        config,
    ));
    let s = source.clone();
    let run = tokio::spawn(async move { s.run().await });
    Routing {
        home,
        other,
        source,
        run,
    }
}

async fn routes_jobs(config: SourceConfig) {
    let fake = fake().start().await.unwrap();
    let Routing {
        home,
        other,
        source,
        run,
    } = routing(&fake, 1, config).await;

    let flag = tempfile::tempdir().unwrap();
    let flag = flag.path().join("go");
    let routed = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("routed")
            .variable("ROUTE", "other")
            .script([format!(
                "while [ ! -e {} ]; do sleep 0.1; done; echo ran elsewhere",
                flag.display()
            )]),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while other.scaler.snapshot().counts.acquired == 0 {
        assert!(Instant::now() < deadline, "the routed job never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // While the routed job runs on the other fleet, it holds nothing on this one: this
    // fleet's only slot takes a plain job (had the routed job kept its first reservation,
    // the plain one could not even be asked for until the routed one ended).
    let plain = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("plain").script(["echo ran here"]),
    );
    assert!(
        fake.wait_finished(&[plain], Duration::from_secs(30)).await,
        "the plain job did not run beside the routed one: {:?}",
        home.scaler.snapshot().counts
    );
    assert!(
        fake.job(routed).unwrap().final_update.is_none(),
        "the routed job still runs"
    );
    std::fs::write(&flag, "").unwrap();

    let refused = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("refused")
            .variable("ROUTE", "refuse")
            .script(["echo never"]),
    );
    assert!(
        fake.wait_finished(&[routed, refused], Duration::from_secs(60))
            .await
    );

    let j = fake.job(routed).unwrap();
    assert_eq!(j.state, FakeJobState::Success, "{}", j.trace_text());
    assert!(
        j.trace_text().contains("sent to the other fleet\n"),
        "{}",
        j.trace_text()
    );
    assert_eq!((home.runs(routed), other.runs(routed)), (0, 1));

    let j = fake.job(refused).unwrap();
    assert_eq!(j.state, FakeJobState::Failed);
    assert!(
        j.trace_text()
            .contains("Job failed (system failure): couldn't prepare overwrites: too big"),
        "{}",
        j.trace_text()
    );
    assert_eq!(
        j.final_update
            .as_ref()
            .and_then(|f| f.failure_reason.as_deref()),
        Some("runner_system_failure")
    );
    assert_eq!((home.runs(refused), other.runs(refused)), (0, 0));

    let j = fake.job(plain).unwrap();
    assert_eq!(j.state, FakeJobState::Success, "{}", j.trace_text());
    assert_eq!((home.runs(plain), other.runs(plain)), (1, 0));

    source.stop_handle().graceful();
    run.await.unwrap();
    // Every claim ended with the source.
    for scaler in [&home.scaler, &other.scaler] {
        let c = scaler.snapshot().counts;
        assert_eq!((c.reserved, c.acquired), (0, 0), "{c:?}");
    }
}

#[tokio::test]
async fn a_routed_job_runs_on_the_other_executor_and_a_refused_one_fails() {
    routes_jobs(source_config()).await;
}

#[tokio::test]
async fn routing_works_the_same_with_two_phase_acceptance() {
    routes_jobs(two_phase_source_config()).await;
}

/// Issue 27 (4): a job routed to a fleet whose every slot is promised waits for one, as a
/// job GitLab handed over waits on any fleet (up to `instance_acquire_timeout`). It used to
/// fail at once as a system failure ("every slot the fleet may have is promised"), so a
/// `parallel:matrix` of one shape larger than its fleet lost its extra jobs.
#[tokio::test]
async fn a_job_routed_to_a_full_fleet_waits_for_a_slot() {
    let fake = fake().start().await.unwrap();
    let Routing {
        home,
        other,
        source,
        run,
    } = routing(&fake, 2, source_config()).await;

    let flag = tempfile::tempdir().unwrap();
    let flag = flag.path().join("go");
    let first = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("first")
            .variable("ROUTE", "other")
            .script([format!(
                "while [ ! -e {} ]; do sleep 0.1; done; echo first done",
                flag.display()
            )]),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while other.scaler.snapshot().counts.acquired == 0 {
        assert!(
            Instant::now() < deadline,
            "the first routed job never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let second = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("second")
            .variable("ROUTE", "other")
            .script(["echo second ran"]),
    );
    // The second job is taken and waits: nothing is reported for it while the first runs.
    let deadline = Instant::now() + Duration::from_secs(30);
    while fake.job(second).unwrap().handouts == 0 {
        assert!(Instant::now() < deadline, "the second job was never taken");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        fake.job(second).unwrap().final_update.is_none(),
        "the second job waits instead of failing: {}",
        fake.job(second).unwrap().trace_text()
    );
    std::fs::write(&flag, "").unwrap();
    assert!(
        fake.wait_finished(&[first, second], Duration::from_secs(60))
            .await
    );
    for id in [first, second] {
        let j = fake.job(id).unwrap();
        assert_eq!(j.state, FakeJobState::Success, "{}", j.trace_text());
        assert_eq!((home.runs(id), other.runs(id)), (0, 1));
    }
    source.stop_handle().graceful();
    run.await.unwrap();
}
