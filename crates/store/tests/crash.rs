//! `kill -9` at random moments: a child process writes a deterministic stream of ledger
//! events and job transitions, one transaction each, printing `ack N` after each commit; the
//! parent SIGKILLs it at a random moment, opens the store and checks that it holds exactly
//! the first N or N+1 steps of the stream (everything acknowledged, plus at most the one
//! transaction in flight) and passes SQLite's integrity check. Then it starts a new child
//! that continues the stream from there, on the same file, and does it again.
//!
//! Holding exactly a prefix of the stream is stronger than "every acquisition references an
//! instance or is explainable" and "counts are monotonic as written": every row is explained
//! by the events that wrote it, in order, and nothing acknowledged is lost.
//!
//! The child is this test binary itself, running the ignored `crash_child_writer` test.

use flotilla_fleet::State;
use flotilla_scaler::{Cause, InstanceRecord, JournalEvent, RemovalReason};
use flotilla_store::{Identity, JobOutcome, JobStart, JobState, Store, StoreOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const PATH_ENV: &str = "FLOTILLA_STORE_CRASH_PATH";
const START_ENV: &str = "FLOTILLA_STORE_CRASH_START";
const SEED: u64 = 0x5EED_F10A;
const KILLS: usize = 32;
const SOURCE: &str = "gitlab";

fn identity() -> Identity {
    Identity::new("https://gitlab.example.com", "17", "docker:crash")
}

/// One transaction of the stream.
#[derive(Debug, Clone)]
enum Step {
    Event(JournalEvent),
    Start(String, String, usize),
    Finish(String, bool),
    Report(String),
}

/// What the store must hold after a prefix of the stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Model {
    requested: usize,
    instances: BTreeMap<String, InstanceRecord>,
    acquisitions: BTreeMap<String, (String, usize)>,
    running: BTreeSet<String>,
    finished: BTreeSet<String>,
}

fn pick<T: Clone>(rng: &mut ChaCha8Rng, items: impl ExactSizeIterator<Item = T>) -> Option<T> {
    let mut items = items;
    match items.len() {
        0 => None,
        n => items.nth(rng.random_range(0..n)),
    }
}

impl Model {
    /// Step `n` of the stream, given the state after steps `0..n` (deterministic).
    fn step(&self, n: u64) -> Step {
        let mut rng = ChaCha8Rng::seed_from_u64(SEED ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let states = [
            State::Creating,
            State::Running,
            State::Deleting,
            State::Deleted,
            State::Timeout,
        ];
        let reasons = [
            RemovalReason::IdleTime,
            RemovalReason::MaxUseCount,
            RemovalReason::Unhealthy,
            RemovalReason::Shutdown,
        ];
        let roll = rng.random_range(0..100);
        if roll < 8 {
            return Step::Event(JournalEvent::RequestedInFlight(rng.random_range(0..6)));
        }
        if roll < 28 {
            let id = format!("i-{}", rng.random_range(0..12));
            let record = match self.instances.get(&id) {
                Some(old) => InstanceRecord {
                    state: states[rng.random_range(0..states.len())],
                    removal: if rng.random_range(0..10) == 0 {
                        Some(reasons[rng.random_range(0..reasons.len())])
                    } else {
                        old.removal
                    },
                    ..old.clone()
                },
                None => InstanceRecord {
                    id,
                    state: State::Creating,
                    cause: [Cause::Requested, Cause::Preexisted, Cause::Restored]
                        [rng.random_range(0..3)],
                    use_count: 0,
                    removal: None,
                },
            };
            return Step::Event(JournalEvent::Instance(record));
        }
        if roll < 33 {
            let id = pick(&mut rng, self.instances.keys().cloned())
                .unwrap_or_else(|| "i-none".to_string());
            return Step::Event(JournalEvent::InstanceGone(id));
        }
        if roll < 58 {
            if let Some(i) = pick(&mut rng, self.instances.values()) {
                return Step::Event(JournalEvent::Acquired {
                    key: format!("k-{n}"),
                    instance: i.id.clone(),
                    slot: rng.random_range(0..4),
                    use_count: i.use_count + 1,
                });
            }
            return Step::Event(JournalEvent::RequestedInFlight(1));
        }
        if roll < 78 {
            let key = pick(&mut rng, self.acquisitions.keys().cloned())
                .unwrap_or_else(|| "k-none".to_string());
            return Step::Event(JournalEvent::Released { key });
        }
        if roll < 86 {
            return Step::Start(
                format!("j-{n}"),
                format!("i-{}", rng.random_range(0..12)),
                rng.random_range(0..4),
            );
        }
        if roll < 93
            && let Some(job) = pick(&mut rng, self.running.iter().cloned())
        {
            return Step::Finish(job, rng.random_bool(0.5));
        }
        match pick(&mut rng, self.finished.iter().cloned()) {
            Some(job) => Step::Report(job),
            None => Step::Start(format!("j-{n}"), "i-0".to_string(), 0),
        }
    }

    /// The store's semantics, in memory.
    fn apply(&mut self, step: &Step) {
        match step {
            Step::Event(JournalEvent::RequestedInFlight(n)) => self.requested = *n,
            Step::Event(JournalEvent::Instance(r)) => {
                self.instances.insert(r.id.clone(), r.clone());
            }
            Step::Event(JournalEvent::InstanceGone(id)) => {
                self.instances.remove(id);
            }
            Step::Event(JournalEvent::Acquired {
                key,
                instance,
                slot,
                use_count,
            }) => {
                self.acquisitions
                    .retain(|k, (i, s)| k == key || !(i == instance && s == slot));
                self.acquisitions
                    .insert(key.clone(), (instance.clone(), *slot));
                if let Some(i) = self.instances.get_mut(instance) {
                    i.use_count = *use_count;
                }
            }
            Step::Event(JournalEvent::Released { key }) => {
                self.acquisitions.remove(key);
            }
            Step::Start(job, _, _) => {
                self.running.insert(job.clone());
            }
            Step::Finish(job, _) => {
                self.running.remove(job);
                self.finished.insert(job.clone());
            }
            Step::Report(job) => {
                self.finished.remove(job);
            }
        }
    }

    fn after(steps: u64) -> Model {
        let mut m = Model::default();
        for n in 0..steps {
            let s = m.step(n);
            m.apply(&s);
        }
        m
    }
}

fn write_step(store: &Store, scope: flotilla_store::ScopeId, step: &Step) {
    let t = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    match step {
        Step::Event(e) => store.journal(scope).record(e).unwrap(),
        Step::Start(job, instance, slot) => store
            .job_started(
                scope,
                &JobStart {
                    source: SOURCE.into(),
                    job_id: job.clone(),
                    key: format!("key-{job}"),
                    instance: instance.clone(),
                    slot: *slot,
                    started_at: t,
                },
            )
            .unwrap(),
        Step::Finish(job, ok) => {
            let outcome = if *ok {
                JobOutcome::Success
            } else {
                JobOutcome::Failed {
                    failure_reason: "script_failure".into(),
                    exit_code: Some(1),
                }
            };
            assert!(store.job_finished(scope, SOURCE, job, &outcome, t).unwrap());
        }
        Step::Report(job) => {
            assert!(store.job_reported(scope, SOURCE, job, t).unwrap());
        }
    }
}

/// What the store holds, in the model's shape.
fn observe(path: &Path) -> Model {
    let store = Store::open(path, StoreOptions::default())
        .unwrap_or_else(|e| panic!("the store must open after kill -9: {e}"));
    let scope = store.scope(&identity()).unwrap();
    let fleet = store.load_fleet(scope).unwrap();
    let mut m = Model {
        requested: fleet.requested_in_flight,
        ..Model::default()
    };
    for i in fleet.instances {
        assert!(m.instances.insert(i.id.clone(), i).is_none());
    }
    let mut slots = BTreeSet::new();
    for (key, instance, slot) in fleet.acquisitions {
        assert!(
            slots.insert((instance.clone(), slot)),
            "slot {instance}/{slot} held twice"
        );
        assert!(m.acquisitions.insert(key, (instance, slot)).is_none());
    }
    for job in store.unfinished_jobs(scope).unwrap() {
        match job.state {
            JobState::Running => m.running.insert(job.job_id),
            JobState::Finished => m.finished.insert(job.job_id),
            JobState::Reported => panic!("unfinished_jobs listed a reported job"),
        };
    }
    m
}

fn integrity_ok(path: &Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

#[test]
#[ignore = "the child process of kill_9_at_random_moments_loses_nothing; run by it"]
fn crash_child_writer() {
    let Ok(path) = std::env::var(PATH_ENV) else {
        return;
    };
    let start: u64 = std::env::var(START_ENV).unwrap().parse().unwrap();
    let mut model = Model::after(start);
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let scope = store.scope(&identity()).unwrap();
    let mut out = std::io::stdout().lock();
    // libtest has printed "test crash_child_writer ... " without a newline.
    writeln!(out, "\nready").unwrap();
    out.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut n = start;
    while Instant::now() < deadline {
        let step = model.step(n);
        write_step(&store, scope, &step);
        model.apply(&step);
        n += 1;
        writeln!(out, "ack {n}").unwrap();
        out.flush().unwrap();
    }
}

enum Heard {
    Ready,
    Ack(u64),
}

#[test]
fn kill_9_at_random_moments_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let exe = std::env::current_exe().unwrap();
    // The stream is fixed; the kill timing is random (and real time is never repeatable).
    let timing_seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("kill timing seed {timing_seed}");
    let mut rng = ChaCha8Rng::seed_from_u64(timing_seed);
    let mut applied = 0u64;
    let mut model = Model::default();
    let mut killed_while_writing = 0;
    let mut killed_early = 0;
    let mut unacknowledged_commits = 0;

    for round in 0..KILLS {
        let log = dir.path().join(format!("child-{round}.log"));
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash::crash_child_writer",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(PATH_ENV, &path)
            .env(START_ENV, applied.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout);
            let mut line = String::new();
            // Only complete lines count: a kill can cut one short.
            while lines.read_line(&mut line).unwrap_or(0) > 0 {
                if let Some(text) = line.strip_suffix('\n') {
                    if text == "ready" {
                        let _ = tx.send(Heard::Ready);
                    } else if let Some(n) = text.strip_prefix("ack ") {
                        let _ = tx.send(Heard::Ack(n.parse().unwrap()));
                    }
                }
                line.clear();
            }
        });

        // One round in five kills at a random moment of start-up (opening, migrating);
        // the others while the child is writing.
        let early = round % 5 == 1;
        if early {
            std::thread::sleep(Duration::from_millis(rng.random_range(0..40)));
        } else {
            let ready = rx.recv_timeout(Duration::from_secs(60));
            assert!(
                matches!(ready, Ok(Heard::Ready)),
                "the child never got ready: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(rng.random_range(1..150)));
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the child exited by itself ({status}): {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        reader.join().unwrap();
        let acked = rx
            .try_iter()
            .filter_map(|h| match h {
                Heard::Ack(n) => Some(n),
                Heard::Ready => None,
            })
            .max()
            .unwrap_or(applied);
        assert!(acked >= applied);
        if acked > applied {
            killed_while_writing += 1;
        } else if early {
            killed_early += 1;
        }

        // The store must hold steps 0..acked, plus perhaps the one in flight.
        for n in applied..acked {
            let s = model.step(n);
            model.apply(&s);
        }
        let found = observe(&path);
        integrity_ok(&path);
        if found == model {
            applied = acked;
        } else {
            let mut next = model.clone();
            next.apply(&model.step(acked));
            assert_eq!(
                found, next,
                "round {round}: the store holds neither the {acked} acknowledged steps nor one more"
            );
            model = next;
            applied = acked + 1;
            unacknowledged_commits += 1;
        }
    }
    // Some kills must have hit the writer mid-stream for this to mean anything.
    assert!(
        killed_while_writing >= 20,
        "only {killed_while_writing} kills landed while writing"
    );
    eprintln!(
        "{KILLS} kills: {killed_while_writing} while writing, {killed_early} during start-up, \
         {unacknowledged_commits} between a commit and its ack; {applied} transactions survived"
    );
    // A final clean open replays nothing new and the model still matches.
    assert_eq!(observe(&path), model);
    assert_eq!(Model::after(applied), model);
}
