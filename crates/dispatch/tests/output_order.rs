//! A stage's stdout and stderr reach the job log as one stream, in the order the job wrote
//! them. Over SSH the two arrive as separate channel streams, cut into packets wherever the
//! instance's sshd happened to read; read apart, a stderr packet could land between two
//! stdout packets: mid-line, and mid-secret, so a masked value reached the log unmasked in
//! two pieces. Here a burst of stdout lines carrying a masked variable, written while a
//! background process also writes stderr, must arrive with every line whole and every
//! secret masked.

use crate::common;

use common::*;
use flotilla_job::{Outcome, Variable};
use flotilla_testkit::infra::{Infra, require};

const SECRET: &str = "Zk7Wm2Qp9Vx4";
const ROUNDS: usize = 10;
const PER_ROUND: usize = 2_000;
const LINES: usize = ROUNDS * PER_ROUND;
const ERR_LINES: usize = 200;
/// A stdout line as the log must show it.
const WHOLE: &str = "a [MASKED] b [MASKED] c [MASKED]";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_stdout_and_stderr_over_ssh_interleave_only_between_writes() {
    if !require(Infra::Docker) {
        return;
    }
    let f = fleet(Level::Shell, "order").await;
    let script = format!(
        "( i=0; while [ $i -lt {ERR_LINES} ]; do echo e >&2; i=$((i+1)); done ) & \
         r=0; while [ $r -lt {ROUNDS} ]; do echo \"$SECRET first\" >&2; \
         i=0; while [ $i -lt {PER_ROUND} ]; do echo \"a $SECRET b $SECRET c $SECRET\"; i=$((i+1)); done; \
         r=$((r+1)); done; wait"
    );
    let mut j = job(&[&script]);
    j.variables.push(Variable::new("SECRET", SECRET).masked());
    let (r, t) = dispatch(&f.dispatcher, &j).await;
    assert_eq!(r.outcome, Outcome::Success);
    let lines: Vec<&str> = t.split('\n').map(|l| l.trim_end_matches('\r')).collect();
    let whole = lines.iter().filter(|l| **l == WHOLE).count();
    let errs = lines.iter().filter(|l| **l == "e").count();
    let broken: Vec<&&str> = lines
        .iter()
        .filter(|l| {
            (l.starts_with("a ") || l.ends_with(" first"))
                && **l != WHOLE
                && **l != "[MASKED] first"
        })
        .take(5)
        .collect();
    assert!(
        whole == LINES && errs == ERR_LINES,
        "{whole} of {LINES} stdout lines and {errs} of {ERR_LINES} stderr lines whole; broken: {broken:?}"
    );
    assert_eq!(
        lines.iter().filter(|l| **l == "[MASKED] first").count(),
        ROUNDS,
        "the stderr lines between the bursts are whole"
    );
    assert!(!t.contains(&SECRET[..3]), "a piece of the secret leaked");
}
