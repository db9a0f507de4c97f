//! `update()` on a 500-instance Auto Scaling group served by moto: API calls per listing and
//! latency, beside a named reference, one `DescribeAutoScalingGroups` call for the same group
//! (which also carries the group's instances and lifecycle states).
//!
//! `cargo bench -p flotilla-provider-aws --bench update` (needs moto: scripts/setup.d/aws.sh).
//! Figures are moto's on loopback, not AWS's: they count calls and show the provider's own
//! cost; AWS's latency per call (tens of ms) multiplies the call count.

use flotilla_fleet::{InstanceGroup, Settings, State};
use flotilla_provider_aws::{AwsGroup, AwsSettings, fixed_config};
use flotilla_testkit::moto::{ACCESS_KEY, GroupSpec, Moto, REGION, SECRET_KEY};
use std::time::{Duration, Instant};

const INSTANCES: u32 = 500;
const ROUNDS: usize = 15;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn summary(mut d: Vec<Duration>) -> String {
    d.sort();
    format!(
        "p50 {:>8.1} ms  p90 {:>8.1} ms  min {:>8.1} ms",
        percentile(&d, 0.5).as_secs_f64() * 1e3,
        percentile(&d, 0.9).as_secs_f64() * 1e3,
        d[0].as_secs_f64() * 1e3
    )
}

#[tokio::main]
async fn main() {
    if flotilla_testkit::infra::moto_server_path().is_none() {
        eprintln!("moto_server not found: run scripts/setup.d/aws.sh");
        std::process::exit(1);
    }
    let moto = Moto::start().await.expect("moto starts");
    let mut spec = GroupSpec::new("bench", 1000);
    spec.desired = INSTANCES;
    let made = Instant::now();
    moto.create_group(&spec).await.expect("group");
    // A second group in the region, as an account with several runners has: its instances
    // are paged through too, since DescribeAutoScalingInstances has no group filter.
    let mut other = GroupSpec::new("other", 100);
    other.desired = 100;
    moto.create_group(&other).await.expect("other group");
    eprintln!(
        "moto: {INSTANCES} + 100 instances made in {:.1} s",
        made.elapsed().as_secs_f64()
    );

    let g = AwsGroup::with_config(
        AwsSettings::new("bench"),
        fixed_config(&moto.endpoint(), REGION, ACCESS_KEY, SECRET_KEY),
    );
    g.init(&Settings::default()).await.expect("init");
    let mut times = Vec::with_capacity(ROUNDS);
    let mut calls = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let before = g.api_calls();
        let t = Instant::now();
        let listing = g.update().await.expect("update");
        times.push(t.elapsed());
        calls.push(g.api_calls() - before);
        assert_eq!(
            listing.iter().filter(|s| s.state == State::Running).count(),
            INSTANCES as usize
        );
    }
    let mut reference = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let body = moto
            .query(
                "autoscaling",
                "2011-01-01",
                "DescribeAutoScalingGroups",
                &[("AutoScalingGroupNames.member.1", "bench".into())],
            )
            .await
            .expect("reference call");
        reference.push(t.elapsed());
        assert!(body.matches("<LifecycleState>").count() >= INSTANCES as usize);
    }
    println!(
        "update() on a {INSTANCES}-instance group (+100 in another group), {ROUNDS} rounds, moto on loopback"
    );
    println!(
        "  flotilla update() (DescribeAutoScalingInstances, 50 a page): {} calls  {}",
        calls[0],
        summary(times)
    );
    println!(
        "  reference: one DescribeAutoScalingGroups call for the group:     1 call   {}",
        summary(reference)
    );
    // moto 5 ignores MaxRecords and NextToken on DescribeAutoScalingInstances (its
    // responses.py passes only InstanceIds on), so it answers in one page; AWS caps a page at
    // 50, and the call lists every group's instances in the region.
    let region_instances = INSTANCES as usize + 100;
    println!(
        "  (moto answers in one page; AWS would take {} pages of 50 for these {region_instances} instances, still none per instance)",
        region_instances.div_ceil(50)
    );
    assert!(calls.iter().all(|c| *c == calls[0]), "{calls:?}");
}
