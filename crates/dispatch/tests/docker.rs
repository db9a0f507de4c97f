//! What only docker isolation does: services with their own network namespaces, pull
//! policies, `volumes`, and sweeping what a crashed manager left on an instance.

use crate::common;

use bollard::query_parameters::ListNetworksOptions;
use common::*;
use flotilla_fleet::Secret;
use flotilla_isolate::{DockerIsolation, Isolation, PrepareRequest};
use flotilla_job::model::{Image, Port};
use flotilla_job::{FailureReason, JobPayload, Outcome, Variable};
use flotilla_testkit::docker_fleet::DockerFleet;
use flotilla_testkit::images::busybox_image;
use flotilla_testkit::infra::{Infra, require};
use std::collections::HashMap;
use std::time::Duration;

/// A busybox web server on port 6379 answering `<word>:<$JOB_WORD>:<$CI_JOB_ID>:<secret>`.
fn web_service(alias: &str, word: &str) -> Image {
    Image {
        name: busybox_image(),
        alias: alias.into(),
        command: vec![
            "sh".into(),
            "-c".into(),
            "mkdir -p /www && echo \"$WORD:$JOB_WORD:$CI_JOB_ID:${SECRET_X:-no-secret}\" > /www/index.html && exec httpd -f -p 6379 -h /www".into(),
        ],
        ports: vec![Port {
            number: 6379,
            ..Default::default()
        }],
        variables: vec![Variable::new("WORD", word)],
        ..Default::default()
    }
}

/// A docker fleet whose docker isolation has `config`.
async fn docker_fleet(name: &str, config: flotilla_isolate::DockerIsolationConfig) -> DockerFleet {
    DockerFleet::start(flotilla_testkit::docker_fleet::FleetOptions::new(
        name,
        flotilla_testkit::docker_fleet::FleetIsolation::Docker(Box::new(config)),
    ))
    .await
}

/// The job networks left on the instances.
async fn job_networks(f: &DockerFleet) -> Vec<String> {
    let mut out = Vec::new();
    for instance in f.instances() {
        let filters = HashMap::from([(
            "label".to_string(),
            vec![
                "flotilla.managed=true".to_string(),
                "flotilla.env".to_string(),
            ],
        )]);
        let list = f
            .inner_docker(&instance)
            .await
            .list_networks(Some(ListNetworksOptions {
                filters: Some(filters),
            }))
            .await
            .unwrap();
        out.extend(list.into_iter().filter_map(|n| n.name));
    }
    out
}

#[tokio::test]
async fn infra_docker_services_on_the_same_port_each_in_their_own_namespace() {
    if !require(Infra::Docker) {
        return;
    }
    let f = fleet(Level::Docker, "services").await;
    let mut j = job_at(
        Level::Docker,
        &[
            "wget -qO- http://svc-a:6379/",
            "wget -qO- http://svc-b:6379/",
            "wget -qO- http://local__flotilla-busybox:6379/",
            "wget -qO- http://local-flotilla-busybox:6379/",
        ],
    );
    j.variables.push(Variable::new("JOB_WORD", "shared"));
    j.variables
        .push(Variable::new("SECRET_X", "do-not-pass").masked());
    j.services = vec![
        web_service("svc-a", "alpha"),
        web_service("svc-b", "beta"),
        // No alias: reachable by the names derived from the image name.
        web_service("", "gamma"),
    ];
    let (r, t) = dispatch(&f.dispatcher, &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    let id = j.id;
    assert!(t.contains(&format!("alpha:shared:{id}:no-secret\n")), "{t}");
    assert!(t.contains(&format!("beta:shared:{id}:no-secret\n")), "{t}");
    assert_eq!(
        t.matches(&format!("gamma:shared:{id}:no-secret\n")).count(),
        2,
        "{t}"
    );
    assert!(
        t.contains("Waiting for services to be up and running"),
        "{t}"
    );
    assert!(!t.contains("probably didn't start properly"), "{t}");
    // Containers and the job's network are gone.
    for instance in f.instances() {
        assert!(f.job_containers(&instance).await.is_empty());
    }
    assert!(job_networks(&f).await.is_empty());
}

#[tokio::test]
async fn infra_docker_a_service_that_never_listens_is_warned_about() {
    if !require(Infra::Docker) {
        return;
    }
    let config = flotilla_isolate::DockerIsolationConfig {
        wait_for_services_timeout: Duration::from_secs(2),
        ..Default::default()
    };
    let f = docker_fleet("deaf", config).await;
    let mut j = job_at(Level::Docker, &["echo job ran"]);
    j.services = vec![Image {
        name: busybox_image(),
        alias: "deaf".into(),
        command: vec!["sleep".into(), "300".into()],
        ports: vec![Port {
            number: 5432,
            ..Default::default()
        }],
        ..Default::default()
    }];
    let (r, t) = dispatch(&f.dispatcher, &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(
        t.contains(&format!(
            "service {} probably didn't start properly: nothing listens on port 5432",
            busybox_image()
        )),
        "{t}"
    );
    assert!(t.contains("job ran\n"), "{t}");
}

#[tokio::test]
async fn infra_docker_pull_policies() {
    if !require(Infra::Docker) {
        return;
    }
    let f = fleet(Level::Docker, "pull").await;
    let with_policy = |image: &str, policy: &[&str]| {
        let mut j = with_image(job(&["echo ran"]), image);
        if let Some(i) = j.image.as_mut() {
            i.pull_policy = policy.iter().map(|s| s.to_string()).collect();
        }
        j
    };
    let image_pull = Outcome::Failed {
        reason: FailureReason::ImagePullFailure,
        exit_code: None,
    };

    // never: a missing image fails at once, clearly.
    let (r, t) = dispatch(&f.dispatcher, &with_policy("local/not-here:1", &["never"])).await;
    assert_eq!(r.outcome, image_pull, "{t}");
    assert!(t.contains("pulling image local/not-here:1"), "{t}");
    assert!(
        t.contains("never: the image is not on the instance and may not be pulled"),
        "{t}"
    );
    assert!(!t.contains("ran\n"), "{t}");

    // never and if-not-present: a present image is used as it is.
    for policy in ["never", "if-not-present"] {
        let (r, t) = dispatch(&f.dispatcher, &with_policy(&busybox_image(), &[policy])).await;
        assert_eq!(r.outcome, Outcome::Success, "{policy}: {t}");
        assert!(t.contains("Using locally found image"), "{t}");
    }

    // always: tries the registry, which is unreachable here.
    let (r, t) = dispatch(&f.dispatcher, &with_policy(&busybox_image(), &["always"])).await;
    assert_eq!(r.outcome, image_pull, "{t}");
    assert!(t.contains("always: pulling failed"), "{t}");

    // always, then if-not-present: falls back to the local image.
    let (r, t) = dispatch(
        &f.dispatcher,
        &with_policy(&busybox_image(), &["always", "if-not-present"]),
    )
    .await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");

    // A service's image follows the same rules.
    let mut j = with_image(job(&["echo ran"]), &busybox_image());
    j.services = vec![Image {
        name: "local/no-such-service:2".into(),
        pull_policy: vec!["never".into()],
        ..Default::default()
    }];
    let (r, t) = dispatch(&f.dispatcher, &j).await;
    assert_eq!(r.outcome, image_pull, "{t}");

    // An unknown policy is the job's configuration error.
    let (r, t) = dispatch(
        &f.dispatcher,
        &with_policy(&busybox_image(), &["sometimes"]),
    )
    .await;
    assert_eq!(
        r.outcome,
        Outcome::Failed {
            reason: FailureReason::RunnerConfigurationError,
            exit_code: None
        },
        "{t}"
    );
    assert!(t.contains("unknown pull policy \"sometimes\""), "{t}");
    for instance in f.instances() {
        assert!(f.job_containers(&instance).await.is_empty());
    }
    assert!(job_networks(&f).await.is_empty());
}

#[tokio::test]
async fn infra_docker_the_dispatcher_sweeps_what_a_crashed_manager_left() {
    if !require(Infra::Docker) {
        return;
    }
    let f = fleet(Level::Docker, "sweep").await;
    let instance = f.instances()[0].clone();
    // A job whose task died mid-job: its environment is up, and nothing will clean it up.
    let crashed = DockerIsolation::default();
    let mut j = job_at(Level::Docker, &["true"]);
    j.services = vec![web_service("svc", "x")];
    let env = crashed
        .prepare(PrepareRequest {
            job: &j,
            instance_id: &instance,
            slot: 3,
            connector: f.ssh(&instance).await,
            builds_dir: "/builds".into(),
            custom_build_dir: None,
        })
        .await
        .unwrap();
    env.prepare(
        &mut tokio::io::sink(),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();
    // The build, service and helper containers.
    assert_eq!(f.job_containers(&instance).await.len(), 3);
    assert_eq!(job_networks(&f).await.len(), 1);
    drop(env);
    drop(crashed);

    // The fleet's dispatcher meets the instance for the first time with its next job.
    let (r, t) = dispatch(&f.dispatcher, &job_at(Level::Docker, &["echo ok"])).await;
    assert!(r.outcome.is_success(), "{t}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left = f.job_containers(&instance).await;
        let networks = job_networks(&f).await;
        if left.is_empty() && networks.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "leftovers stay: {left:?} {networks:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// GitLab's `use_slot_cgroups` with docker isolation: the job's containers go below the slot's
/// cgroup, as an absolute `--cgroup-parent` (a relative one splits the controllers on Docker
/// 20.10 with cgroupfs); and `privileged = true` reaches the engine, whose refusal (privileged
/// containers cannot run on this project's CI machine) ends the job with a clear reason.
#[tokio::test]
async fn infra_docker_slot_cgroups_and_privileged_reach_the_engine() {
    if !require(Infra::Docker) {
        return;
    }
    let template = format!("flotilla-dtest-{}/slot-${{slot}}", std::process::id());
    let config = flotilla_isolate::DockerIsolationConfig {
        slot_cgroups: Some(flotilla_isolate::docker::SlotCgroupTemplates {
            build: template.clone(),
            services: template.clone(),
        }),
        ..Default::default()
    };
    let f = docker_fleet("slotcg", config).await;
    let (r, t) = dispatch(
        &f.dispatcher,
        &job_at(Level::Docker, &["cat /proc/self/cgroup"]),
    )
    .await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    let parent = format!("/flotilla-dtest-{}/slot-0/", std::process::id());
    assert!(
        t.contains(&format!(
            "The job's containers run in the slot's cgroup {}",
            parent.trim_end_matches('/')
        )),
        "{t}"
    );
    for controller in ["memory", "pids", "cpu"] {
        assert!(
            t.lines()
                .any(|l| l.contains(&format!(":{controller}")) && l.contains(&parent)),
            "every controller under the slot's cgroup ({controller}): {t}"
        );
    }
    // The inner engine made the parent in the cgroup tree it shares with this host.
    for base in [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/cpu",
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup/pids",
    ] {
        let top = std::path::Path::new(base).join(format!("flotilla-dtest-{}", std::process::id()));
        let _ = std::fs::remove_dir(top.join("slot-0"));
        let _ = std::fs::remove_dir(top);
    }

    let privileged = flotilla_isolate::DockerIsolationConfig {
        security: flotilla_isolate::docker::security::Security {
            privileged: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let f = docker_fleet("privileged", privileged).await;
    let (r, t) = dispatch(
        &f.dispatcher,
        &job_at(Level::Docker, &["grep CapEff /proc/self/status"]),
    )
    .await;
    match r.outcome {
        // An engine that can run privileged containers runs the job with every capability,
        // not Docker's default set (CapEff 00000000a80425fb).
        Outcome::Success => assert!(
            t.contains("CapEff:") && !t.contains("00000000a80425fb"),
            "{t}"
        ),
        // One that cannot says so in the job's log.
        Outcome::Failed { .. } => assert!(
            t.contains("starting the build container")
                || t.contains("creating the build container"),
            "{t}"
        ),
    }
}

/// `[runners.docker] volumes`, as GitLab Runner binds them: a host path on the instance and a
/// cache volume, in the build container and in the services (a `docker:dind` service shares
/// `/certs/client` with the job this way), the cache volume kept for the project's next job
/// on the slot. Before, only the slot directory was bound and `volumes` was dropped.
#[tokio::test]
async fn infra_docker_volumes_reach_the_build_and_service_containers() {
    if !require(Infra::Docker) {
        return;
    }
    let volume = |v: &str| flotilla_isolate::docker::volumes::Volume::parse(v).unwrap();
    let config = flotilla_isolate::DockerIsolationConfig {
        volumes: vec![
            volume("/srv/flotilla-volumes:/host-data"),
            volume("/shared"),
        ],
        ..Default::default()
    };
    let f = docker_fleet("volumes", config).await;
    let mut first = job_at(
        Level::Docker,
        &[
            "for i in $(seq 1 100); do [ -s /shared/from-service ] && break; sleep 0.1; done",
            "echo \"service wrote: $(cat /shared/from-service)\"",
            "echo kept-for-the-next-job > /shared/from-job",
            "echo on-the-instance > /host-data/file",
        ],
    );
    first.services = vec![Image {
        name: busybox_image(),
        alias: "writer".into(),
        command: vec![
            "sh".into(),
            "-c".into(),
            "echo hello-from-the-service > /shared/from-service && exec sleep 300".into(),
        ],
        ..Default::default()
    }];
    let (r, t) = dispatch(&f.dispatcher, &first).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("service wrote: hello-from-the-service"), "{t}");

    let second = job_at(
        Level::Docker,
        &["cat /shared/from-job", "cat /host-data/file"],
    );
    let (r, t) = dispatch(&f.dispatcher, &second).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(
        t.contains("kept-for-the-next-job"),
        "the cache volume was kept: {t}"
    );
    assert!(
        t.contains("on-the-instance"),
        "the instance's directory: {t}"
    );
}

/// `[runners.docker] disable_cache = true`: a cache volume is the job's own, shared by its
/// build and service containers, and gone after the job (GitLab Runner's `addCacheVolume`
/// makes it non-reusable and removes it), so the next job starts with an empty one.
#[tokio::test]
async fn infra_docker_disable_cache_gives_each_job_a_cache_volume_of_its_own() {
    if !require(Infra::Docker) {
        return;
    }
    let config = flotilla_isolate::DockerIsolationConfig {
        volumes: vec![flotilla_isolate::docker::volumes::Volume::parse("/shared").unwrap()],
        disable_cache: true,
        ..Default::default()
    };
    let f = docker_fleet("nocache", config).await;
    let mut first = job_at(
        Level::Docker,
        &[
            "for i in $(seq 1 100); do [ -s /shared/from-service ] && break; sleep 0.1; done",
            "echo \"service wrote: $(cat /shared/from-service)\"",
            "echo left-by-the-first-job > /shared/from-job",
        ],
    );
    first.services = vec![Image {
        name: busybox_image(),
        alias: "writer".into(),
        command: vec![
            "sh".into(),
            "-c".into(),
            "echo hello-from-the-service > /shared/from-service && exec sleep 300".into(),
        ],
        ..Default::default()
    }];
    let (r, t) = dispatch(&f.dispatcher, &first).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("service wrote: hello-from-the-service"), "{t}");

    let second = job_at(
        Level::Docker,
        &[
            "ls -A /shared",
            "test ! -e /shared/from-job && echo a-fresh-volume",
        ],
    );
    let (r, t) = dispatch(&f.dispatcher, &second).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("a-fresh-volume"), "the volume was not kept: {t}");

    // Nothing of either job's volumes is left on the instance.
    for instance in f.instances() {
        let listed = f
            .inner_docker(&instance)
            .await
            .list_volumes(None::<bollard::query_parameters::ListVolumesOptions>)
            .await
            .unwrap();
        let left: Vec<String> = listed
            .volumes
            .unwrap_or_default()
            .into_iter()
            .map(|v| v.name)
            .filter(|n| n.contains("-job-"))
            .collect();
        assert!(left.is_empty(), "job volumes left: {left:?}");
    }
}

/// `[runners.docker] cache_dir`: a cache volume is a directory under it on the instance
/// (GitLab Runner's `createHostBasedCacheVolume`), kept for the project's next job on the slot.
#[tokio::test]
async fn infra_docker_cache_dir_keeps_cache_volumes_on_the_instance() {
    if !require(Infra::Docker) {
        return;
    }
    let config = flotilla_isolate::DockerIsolationConfig {
        volumes: vec![flotilla_isolate::docker::volumes::Volume::parse("/shared").unwrap()],
        cache_dir: Some("/srv/flotilla-cache-dir".into()),
        ..Default::default()
    };
    let f = docker_fleet("cachedir", config).await;
    let (r, t) = dispatch(
        &f.dispatcher,
        &job_at(Level::Docker, &["echo kept-on-the-instance > /shared/mark"]),
    )
    .await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    let (r, t) = dispatch(&f.dispatcher, &job_at(Level::Docker, &["cat /shared/mark"])).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("kept-on-the-instance"), "{t}");
    let instance = f.instances().into_iter().next().expect("an instance");
    let found = on_instance(&f, &instance, "find /srv/flotilla-cache-dir -name mark").await;
    assert!(
        found.contains("/srv/flotilla-cache-dir/flotilla-project-7-concurrent-"),
        "the cache is a directory under cache_dir: {found:?}"
    );
}

/// `[runners.docker] cap_drop` and `security_opt` reach the build container as the kernel
/// sees them from inside it (GitLab Runner's `createHostConfig`); a job whose image is not in
/// `allowed_privileged_images` runs unprivileged though `privileged = true`. Before, all of
/// them were warned about and dropped: a runner that dropped capabilities ran jobs with
/// Docker's default set. (`cap_add` is checked in the container's specification only: the
/// test instance, itself a container, cannot grant capabilities beyond its own.)
#[tokio::test]
async fn infra_docker_the_build_container_has_the_capabilities_and_options_the_runner_sets() {
    if !require(Infra::Docker) {
        return;
    }
    let config = flotilla_isolate::DockerIsolationConfig {
        security: flotilla_isolate::docker::security::Security {
            privileged: true,
            allowed_privileged_images: flotilla_isolate::docker::allowed::AllowedImages::new(&[
                "docker:*-dind".to_string(),
            ])
            .unwrap(),
            cap_drop: vec!["NET_RAW".into(), "CHOWN".into()],
            security_opt: vec!["no-new-privileges".into()],
            ..Default::default()
        },
        ..Default::default()
    };
    let f = docker_fleet("security", config).await;
    let (r, t) = dispatch(
        &f.dispatcher,
        &job_at(
            Level::Docker,
            &[
                "grep -E '^(CapEff|NoNewPrivs):' /proc/self/status",
                "chown 1 /tmp && echo chown-allowed || echo chown-refused",
            ],
        ),
    )
    .await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    let cap_eff = t
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap_or_else(|| panic!("no CapEff line: {t}"));
    // Docker's default set is 0xa80425fb: CHOWN is bit 0, NET_RAW bit 13, SETUID bit 7. A
    // privileged container would have them all.
    assert_eq!(cap_eff & 1, 0, "CHOWN dropped: {t}");
    assert_eq!(cap_eff & (1 << 13), 0, "NET_RAW dropped: {t}");
    assert_ne!(
        cap_eff & (1 << 7),
        0,
        "the rest of the default set kept: {t}"
    );
    assert!(t.contains("NoNewPrivs:\t1"), "no-new-privileges: {t}");
    assert!(t.contains("chown-refused"), "{t}");
}

/// `[runners.docker] cpus` and `memory` limit the build container, and `services_limit`
/// refuses a job with more services, in GitLab's words (`executors/docker/services.go`).
/// Before, all three were parsed and dropped.
#[tokio::test]
async fn infra_docker_cpus_memory_and_services_limit_reach_the_engine() {
    if !require(Infra::Docker) {
        return;
    }
    let config = flotilla_isolate::DockerIsolationConfig {
        build_limits: flotilla_isolate::docker::limits::BuildLimits::parse(
            Some("0.5"),
            Some("64m"),
        )
        .unwrap(),
        services_limit: Some(1),
        ..Default::default()
    };
    let f = docker_fleet("limits", config).await;
    let (r, t) = dispatch(
        &f.dispatcher,
        &job_at(
            Level::Docker,
            &[
                "echo memory=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max)",
                "echo cpu=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cat /sys/fs/cgroup/cpu.max)",
            ],
        ),
    )
    .await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("memory=67108864"), "{t}");
    assert!(t.contains("cpu=50000"), "{t}");

    let mut two = job_at(Level::Docker, &["true"]);
    two.services = vec![web_service("one", "a"), web_service("two", "b")];
    let (r, t) = dispatch(&f.dispatcher, &two).await;
    assert!(
        matches!(r.outcome, Outcome::Failed { .. }),
        "two services with services_limit = 1 ran: {t}"
    );
    assert!(
        t.contains("too many services requested: 2, only 1 allowed"),
        "{t}"
    );

    // The runner's own services count too, as GitLab Runner counts them
    // (`getServicesDefinitions`, executors/docker/docker.go: the runner's first, then the
    // job's, the whole list against the limit).
    let config = flotilla_isolate::DockerIsolationConfig {
        services_limit: Some(1),
        services: vec![web_service("runner-one", "r")],
        ..Default::default()
    };
    let f = docker_fleet("limits-runner", config).await;
    let mut one = job_at(Level::Docker, &["true"]);
    one.services = vec![web_service("one", "a")];
    let (r, t) = dispatch(&f.dispatcher, &one).await;
    assert!(
        t.contains("too many services requested: 2, only 1 allowed"),
        "a runner service and a job service with services_limit = 1: {r:?} {t}"
    );
}

/// Issue 31 (0): a job's `hooks:pre_get_sources_script` and `post_get_sources_script` are
/// its own commands, and at the docker level they run in the job's container, never in the
/// instance's shell that other jobs share (GitLab runs them in the helper container, the
/// job's too). Before, they ran on the instance, outside the container.
#[tokio::test]
async fn infra_docker_get_sources_hooks_run_in_the_jobs_container() {
    if !require(Infra::Docker) {
        return;
    }
    let f = DockerFleet::start(flotilla_testkit::docker_fleet::FleetOptions::docker(
        "hooks",
    ))
    .await;
    let mut j = job_at(
        Level::Docker,
        &["ls /pre-hook-was-here /post-hook-was-here && echo both-hooks-ran-in-the-container"],
    );
    j.hooks = vec![
        flotilla_job::model::Hook {
            name: flotilla_job::model::HOOK_PRE_GET_SOURCES.into(),
            script: vec!["touch /pre-hook-was-here".into()],
        },
        flotilla_job::model::Hook {
            name: flotilla_job::model::HOOK_POST_GET_SOURCES.into(),
            script: vec!["touch /post-hook-was-here".into()],
        },
    ];
    let (r, t) = dispatch(&f.dispatcher, &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("both-hooks-ran-in-the-container"), "{t}");
    let instance = f.instances()[0].clone();
    let on_host = on_instance(
        &f,
        &instance,
        "ls /pre-hook-was-here /post-hook-was-here 2>&1 || true",
    )
    .await;
    assert!(
        on_host.contains("No such file"),
        "a hook ran on the instance: {on_host}"
    );
}

/// Issue 32 (security controls): `allowed_images` and `allowed_services` refuse a job that
/// names an image or a service off the list, in GitLab's words, before anything is pulled;
/// the runner's default image is always allowed. Before, both were ignored (failing open).
#[tokio::test]
async fn infra_docker_allowed_images_and_services_refuse_the_job() {
    if !require(Infra::Docker) {
        return;
    }
    use flotilla_isolate::docker::allowed::AllowedImages;
    let config = flotilla_isolate::DockerIsolationConfig {
        allowed_images: AllowedImages::new(&["registry.example/**/*:*".to_string()]).unwrap(),
        allowed_services: AllowedImages::new(&["registry.example/**/*:*".to_string()]).unwrap(),
        default_image: Some(busybox_image()),
        ..Default::default()
    };
    let f = docker_fleet("allowed", config).await;
    // The runner's own default image is allowed.
    let (r, t) = dispatch(&f.dispatcher, &job_at(Level::Docker, &["echo allowed"])).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");

    let mut off_list = job_at(Level::Docker, &["echo must-not-run"]);
    off_list.image = Some(Image {
        name: "evil/miner:latest".into(),
        ..Default::default()
    });
    let (r, t) = dispatch(&f.dispatcher, &off_list).await;
    assert!(matches!(r.outcome, Outcome::Failed { .. }), "{t}");
    assert!(
        t.contains("The \"evil/miner:latest\" image is not present on list of allowed images:")
            && t.contains("- registry.example/**/*:*"),
        "{t}"
    );
    assert!(!t.contains("must-not-run") && !t.contains("Pulling"), "{t}");

    let mut service = job_at(Level::Docker, &["echo must-not-run"]);
    service.services = vec![web_service("svc", "x")];
    let (r, t) = dispatch(&f.dispatcher, &service).await;
    assert!(matches!(r.outcome, Outcome::Failed { .. }), "{t}");
    assert!(
        t.contains("image is not present on list of allowed services:"),
        "{t}"
    );
}

/// A repository served by `git daemon` on the instance's loopback (`git://127.0.0.1/p.git`),
/// one commit on `main`.
async fn serve_repository(f: &DockerFleet, instance: &str) -> String {
    let script = "set -e; rm -rf /srv/git /tmp/seed; mkdir -p /srv/git /tmp/seed; \
        cd /tmp/seed; git -c init.defaultBranch=main init -q .; echo hello > README; \
        git add README; git -c user.name=t -c user.email=t@example.invalid commit -qm one; \
        git clone -q --bare /tmp/seed /srv/git/p.git; \
        (setsid git daemon --reuseaddr --export-all --base-path=/srv/git \
           --listen=127.0.0.1 --port=9418 >/dev/null 2>&1 </dev/null &); \
        for i in $(seq 50); do git ls-remote git://127.0.0.1/p.git >/dev/null 2>&1 && exit 0; \
           sleep 0.1; done; echo git daemon did not answer >&2; exit 1";
    let out = on_instance(f, instance, &format!("sh -c '{script}' && echo served")).await;
    assert!(out.contains("served"), "{out}");
    "git://127.0.0.1/p.git".into()
}

/// A docker-level job that fetches `url` into the same project directory each time.
fn fetching_job(url: &str, script: &[&str]) -> JobPayload {
    let mut j = job_at(Level::Docker, script);
    j.variables = vec![Variable::new("GIT_STRATEGY", "fetch")];
    j.git_info.repo_url = Secret::new(url.to_string());
    j.git_info.sha = String::new();
    j.git_info.depth = 0;
    j
}

/// Issue 31, item 0: the helper stages run outside the job's container, so nothing a job
/// controls may make them run a command there. Two ways it did: the job's variables reached
/// the `git` of `get_sources` (`GIT_CONFIG_*` names `core.fsmonitor`, a command git runs), and
/// a job's container wrote the project's `.git` (a hook, `core.fsmonitor` in `.git/config`)
/// that the next job's fetch, outside the container, ran. Neither may leave a mark on the
/// instance.
#[tokio::test]
async fn infra_docker_nothing_a_job_controls_runs_outside_its_container() {
    if !require(Infra::Docker) {
        return;
    }
    let f = fleet(Level::Docker, "helper").await;
    let instance = f.instances().remove(0);
    let url = serve_repository(&f, &instance).await;
    let marks = "/tmp/flotilla-mark-env /tmp/flotilla-mark-config /tmp/flotilla-mark-hook";
    on_instance(&f, &instance, &format!("rm -f {marks}")).await;

    // Variables that make git run a command, in the job's own fetch.
    let mut first = fetching_job(
        &url,
        &[
            "test -f README",
            // Plant what a later fetch of this project would run.
            "printf '[core]\\n\\tfsmonitor = \"touch /tmp/flotilla-mark-config; false\"\\n' >> .git/config",
            "mkdir -p .git/hooks",
            "for h in reference-transaction post-checkout post-merge pre-auto-gc; do printf '#!/bin/sh\\ntouch /tmp/flotilla-mark-hook\\n' > .git/hooks/$h; chmod +x .git/hooks/$h; done",
        ],
    );
    first.variables.extend([
        Variable::new("GIT_CONFIG_COUNT", "1"),
        Variable::new("GIT_CONFIG_KEY_0", "core.fsmonitor"),
        // Also in the project's `.git` (git runs the monitor there, and `git clean` leaves
        // `.git` alone): a mark that a variable reached git wherever the fetch ran, helper
        // container included.
        Variable::new(
            "GIT_CONFIG_VALUE_0",
            "touch /tmp/flotilla-mark-env .git/flotilla-mark-env; false",
        ),
    ]);
    let (r, t) = dispatch(&f.dispatcher, &first).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    // The next job of the project on the slot fetches into what the first one left.
    let second = fetching_job(&url, &["test -f README", "test -f .git/HEAD"]);
    let (r, t) = dispatch(&f.dispatcher, &second).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    let left = on_instance(
        &f,
        &instance,
        &format!("for m in {marks}; do [ ! -e $m ] || echo $m; done"),
    )
    .await;
    assert_eq!(left.trim(), "", "a job ran commands on the instance:\n{t}");
    let in_project = on_instance(
        &f,
        &instance,
        "[ ! -e /builds/0/.project-7/group/project/.git/flotilla-mark-env ] || echo reached; \
         [ -d /builds/0/.project-7/group/project/.git ] && echo checked-out",
    )
    .await;
    assert_eq!(
        in_project.trim(),
        "checked-out",
        "the job's GIT_CONFIG_* variables reached git:\n{t}"
    );
}

/// A job sees its own project's directory, never another project's: on GitLab each project
/// has its own builds volume; here the slot directory of every project used to be bound into
/// the container, so the next job on the slot read the previous project's checkout.
#[tokio::test]
async fn infra_docker_a_job_cannot_read_another_projects_directory() {
    if !require(Infra::Docker) {
        return;
    }
    let f = fleet(Level::Docker, "projects").await;
    let first = job_at(
        Level::Docker,
        &[
            "echo private-source > \"$CI_PROJECT_DIR/secret-of-a\"",
            "ls \"$CI_PROJECT_DIR\"",
        ],
    );
    let (r, t) = dispatch(&f.dispatcher, &first).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("secret-of-a"), "{t}");
    let mut other = job_at(
        Level::Docker,
        &[
            "echo \"dir=$CI_PROJECT_DIR\"",
            "echo \"found=$(find \"$CI_BUILDS_DIR\" -name secret-of-a 2>/dev/null | tr '\\n' ,)\"",
        ],
    );
    other.job_info.project_id = 8;
    other.job_info.project_full_path = "other/b".into();
    let (r, t) = dispatch(&f.dispatcher, &other).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("dir=/builds/0/other/b\n"), "{t}");
    assert!(
        t.contains("found=\n"),
        "another project's file was visible: {t}"
    );
    // The same project on the slot finds its directory again (GIT_STRATEGY=fetch reuses it).
    let again = job_at(Level::Docker, &["cat \"$CI_PROJECT_DIR/secret-of-a\""]);
    let (r, t) = dispatch(&f.dispatcher, &again).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("private-source"), "{t}");

    // Issue 32: a `GIT_CLONE_PATH` outside the slot directory (custom_build_dir is on for
    // docker, as GitLab's default): the helper and build containers both work there, the
    // directory is the project's own on the slot (another project with the same path sees
    // nothing of it), and the project finds it again.
    let clone_path = Variable::new("GIT_CLONE_PATH", "$CI_BUILDS_DIR/go/src/app");
    let mut custom = job_at(
        Level::Docker,
        &[
            "echo \"dir=$CI_PROJECT_DIR pwd=$(pwd)\"",
            "echo custom-source > custom-file",
        ],
    );
    custom.variables.push(clone_path.clone());
    let (r, t) = dispatch(&f.dispatcher, &custom).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(
        t.contains("dir=/builds/go/src/app pwd=/builds/go/src/app\n"),
        "{t}"
    );
    let mut stranger = job_at(
        Level::Docker,
        &["echo \"found=$(ls /builds/go/src/app 2>/dev/null | tr '\\n' ,)\""],
    );
    stranger.job_info.project_id = 8;
    stranger.job_info.project_full_path = "other/b".into();
    stranger.variables.push(clone_path.clone());
    let (r, t) = dispatch(&f.dispatcher, &stranger).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(
        t.contains("found=\n"),
        "another project's file was visible: {t}"
    );
    let mut back = job_at(Level::Docker, &["cat custom-file"]);
    back.variables.push(clone_path);
    let (r, t) = dispatch(&f.dispatcher, &back).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("custom-source"), "{t}");
}

/// Issue 32: `[runners.docker]` `shm_size`, `ulimit`, `tmpfs`, `extra_hosts`, `dns_search`,
/// `hostname`, `sysctls` and `oom_kill_disable` reach the build container as GitLab Runner
/// gives them (`createHostConfig`), seen from inside the job. Before, every one of them was
/// accepted and dropped.
#[tokio::test]
async fn infra_docker_container_options_reach_the_build_container() {
    if !require(Infra::Docker) {
        return;
    }
    use flotilla_isolate::docker::options::{ContainerOptions, RawContainerOptions};
    let options = ContainerOptions::parse(&RawContainerOptions {
        shm_size: 96 * 1024 * 1024,
        ulimit: HashMap::from([("nofile".into(), "1111:2222".into())]),
        tmpfs: HashMap::from([("/scratch".into(), "rw,size=8m".into())]),
        extra_hosts: vec!["gitlab.flotilla.test:10.9.8.7".into()],
        dns_search: vec!["corp.flotilla.test".into()],
        hostname: "flotilla-builder".into(),
        sysctls: HashMap::from([("net.ipv4.ip_unprivileged_port_start".into(), "99".into())]),
        ..RawContainerOptions::default()
    })
    .unwrap();
    let config = flotilla_isolate::DockerIsolationConfig {
        options,
        ..Default::default()
    };
    let f = docker_fleet("options", config).await;
    let (r, t) = dispatch(
        &f.dispatcher,
        &job_at(
            Level::Docker,
            &[
                "echo \"shm=$(df -k /dev/shm | awk 'NR==2 {print $2}')\"",
                // The container's own limits (an exec's soft limit follows the runtime's).
                "echo \"nofile=$(grep 'open files' /proc/1/limits | tr -s ' ' | cut -d' ' -f4,5)\"",
                "echo \"scratch=$(grep ' /scratch ' /proc/mounts | cut -d' ' -f3)\"",
                "echo \"hosts=$(grep gitlab.flotilla.test /etc/hosts | awk '{print $1}')\"",
                "echo \"search=$(grep ^search /etc/resolv.conf)\"",
                "echo \"hostname=$(hostname)\"",
                "echo \"port_start=$(cat /proc/sys/net/ipv4/ip_unprivileged_port_start)\"",
            ],
        ),
    )
    .await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    for want in [
        "shm=98304\n",
        "nofile=1111 2222\n",
        "scratch=tmpfs\n",
        "hosts=10.9.8.7\n",
        "hostname=flotilla-builder\n",
        "port_start=99\n",
    ] {
        assert!(t.contains(want), "{want:?} missing:\n{t}");
    }
    assert!(t.contains("corp.flotilla.test"), "{t}");
}

/// Issue 32: `disable_entrypoint_overwrite` keeps the image's entrypoint whatever the job's
/// `entrypoint` asks, with GitLab's warning, and `wait_for_services_timeout = -1` (zero here)
/// starts the job without waiting for its services. Both were accepted and ignored.
#[tokio::test]
async fn infra_docker_entrypoint_overwrite_and_service_wait_follow_the_runner() {
    if !require(Infra::Docker) {
        return;
    }
    let config = flotilla_isolate::DockerIsolationConfig {
        disable_entrypoint_overwrite: true,
        wait_for_services_timeout: Duration::ZERO,
        ..Default::default()
    };
    let f = docker_fleet("entrypoint", config).await;
    let mut j = job_at(
        Level::Docker,
        &["echo \"mark=$(tr '\\0' '\\n' < /proc/1/environ | grep -c '^MARK=' || true)\""],
    );
    j.image
        .as_mut()
        .expect("a docker job has an image")
        .entrypoint = vec!["env".into(), "MARK=overridden".into()];
    // A service that never listens: with no wait, nothing is said about it.
    j.services = vec![Image {
        name: busybox_image(),
        alias: "quiet".into(),
        command: vec!["sleep".into(), "600".into()],
        ports: vec![Port {
            number: 6379,
            ..Default::default()
        }],
        ..Default::default()
    }];
    let (r, t) = dispatch(&f.dispatcher, &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("Entrypoint override disabled"), "{t}");
    assert!(t.contains("mark=0\n"), "the job's entrypoint ran: {t}");
    assert!(!t.contains("Waiting for services"), "{t}");
    assert!(!t.contains("probably didn't start properly"), "{t}");
}

/// Issue 32: `network_mode` as GitLab reads it. The name of a network the operator made: the
/// job's build container and services join it and reach each other by alias, and flotilla
/// makes no network of its own. `host` for a job without services: the build container shares
/// the instance's network. It was warned and ignored.
#[tokio::test]
async fn infra_docker_network_mode_places_the_jobs_containers() {
    if !require(Infra::Docker) {
        return;
    }
    use flotilla_isolate::docker::network::NetworkMode;
    let shared = format!("flotilla-ci-net-{}", std::process::id());
    let named = docker_fleet(
        "netnamed",
        flotilla_isolate::DockerIsolationConfig {
            network_mode: NetworkMode::UserDefined(shared.clone()),
            ..Default::default()
        },
    )
    .await;
    let instance = named.instances().remove(0);
    named
        .inner_docker(&instance)
        .await
        .create_network(bollard::models::NetworkCreateRequest {
            name: shared.clone(),
            driver: Some("bridge".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut j = job_at(Level::Docker, &["wget -qO- http://svc-shared:6379/"]);
    j.services = vec![web_service("svc-shared", "on-shared")];
    let (r, t) = dispatch(&named.dispatcher, &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains(&format!("on-shared::{}:no-secret", j.id)), "{t}");
    assert!(
        job_networks(&named).await.is_empty(),
        "a job network was made"
    );
    // The operator's network is still there.
    let left = named
        .inner_docker(&instance)
        .await
        .inspect_network(&shared, None)
        .await;
    assert!(left.is_ok(), "{left:?}");

    let host = docker_fleet(
        "nethost",
        flotilla_isolate::DockerIsolationConfig {
            network_mode: NetworkMode::Builtin("host".into()),
            ..Default::default()
        },
    )
    .await;
    // The instance runs its own dockerd: only its network namespace has `docker0`.
    let (r, t) = dispatch(
        &host.dispatcher,
        &job_at(
            Level::Docker,
            &["echo \"docker0=$(grep -c docker0: /proc/net/dev || true)\""],
        ),
    )
    .await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(
        t.contains("docker0=1\n"),
        "the job is not on the instance's network: {t}"
    );
}

/// Issue 32: `allowed_users` as GitLab's `IsUserAllowed` reads it: a job's
/// `image:docker:user` off the list is refused in GitLab's words, one on it runs as that user,
/// and the image's own user is always allowed. Both keys were warned and ignored.
#[tokio::test]
async fn infra_docker_allowed_users_decide_the_build_user() {
    if !require(Infra::Docker) {
        return;
    }
    let config = flotilla_isolate::DockerIsolationConfig {
        security: flotilla_isolate::docker::security::Security {
            allowed_users: vec!["1000".into()],
            ..Default::default()
        },
        ..Default::default()
    };
    let f = docker_fleet("users", config).await;
    let as_user = |user: &str| {
        let mut j = job_at(Level::Docker, &["echo \"uid=$(id -u)\""]);
        j.image
            .as_mut()
            .expect("a docker job has an image")
            .executor_opts
            .docker = Some(flotilla_job::model::DockerOptions {
            user: user.into(),
            ..Default::default()
        });
        j
    };
    let (r, t) = dispatch(&f.dispatcher, &as_user("1000")).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("uid=1000\n"), "{t}");
    let (r, t) = dispatch(&f.dispatcher, &as_user("0")).await;
    assert!(matches!(r.outcome, Outcome::Failed { .. }), "{t}");
    assert!(
        t.contains("user \"0\" is not an allowed user: [1000]"),
        "{t}"
    );
    assert!(!t.contains("uid="), "{t}");
    let (r, t) = dispatch(&f.dispatcher, &as_user("")).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("uid=0\n"), "{t}");
}

/// Issue 32: `[[runners.docker.services]]` start with every job, before its own, reachable by
/// their alias, and allowed whatever `allowed_services` says (GitLab's internal images);
/// `services_devices` gives a matching service its devices. Both were warned and ignored.
#[tokio::test]
async fn infra_docker_the_runners_services_come_with_every_job() {
    if !require(Infra::Docker) {
        return;
    }
    use flotilla_isolate::docker::allowed::AllowedImages;
    use flotilla_isolate::docker::security::DeviceMapping;
    let runner_service = Image {
        name: busybox_image(),
        alias: "runner-svc".into(),
        command: vec![
            "sh".into(),
            "-c".into(),
            "mkdir -p /www && ls /dev/svc-zero > /www/index.html 2>&1; exec httpd -f -p 6379 -h /www"
                .into(),
        ],
        ..Default::default()
    };
    let config = flotilla_isolate::DockerIsolationConfig {
        services: vec![runner_service],
        services_devices: vec![(
            AllowedImages::new(&["local/flotilla-busybox:*".to_string()]).unwrap(),
            vec![DeviceMapping::parse("/dev/zero:/dev/svc-zero").unwrap()],
        )],
        allowed_services: AllowedImages::new(&["registry.example/**/*:*".to_string()]).unwrap(),
        ..Default::default()
    };
    let f = docker_fleet("runnersvc", config).await;
    // The job names no service of its own, and the allow list names none of the runner's.
    let j = job_at(Level::Docker, &["wget -qO- http://runner-svc:6379/"]);
    let (r, t) = dispatch(&f.dispatcher, &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(
        t.contains("/dev/svc-zero\n"),
        "the service has no /dev/svc-zero: {t}"
    );
    // A service the job names itself is still checked against the list (the runner's own
    // images excepted, as GitLab's `internalServiceImages`).
    let mut own = job_at(Level::Docker, &["echo must-not-run"]);
    own.services = vec![Image {
        name: "other.example/db:1".into(),
        ..Default::default()
    }];
    let (r, t) = dispatch(&f.dispatcher, &own).await;
    assert!(matches!(r.outcome, Outcome::Failed { .. }), "{t}");
    assert!(
        t.contains("is not present on list of allowed services"),
        "{t}"
    );
}

/// Issue 32: the `[runners.docker]` keys that were warned as not implemented, through the
/// level's own settings type: `pid_mode` (the build container sees the instance's processes),
/// `volume_driver` and `volume_driver_ops` (the cache volume is made with them: a tmpfs),
/// `container_labels` (on the build container, `$VARIABLES` expanded with the job's),
/// `log_options` (the json-file driver's options on every container), and a runner service's
/// `environment` and `entrypoint`. The engine on the instance is asked what it made while the job runs.
#[tokio::test]
async fn infra_docker_pid_mode_volume_driver_labels_log_options_and_service_environment() {
    if !require(Infra::Docker) {
        return;
    }
    use flotilla_isolate::docker::{DockerContext, DockerSettings, RunnerService};
    let settings = DockerSettings {
        // The fleet's images are on its instances already.
        pull_policy: vec![flotilla_isolate::docker::PullPolicy::IfNotPresent],
        pid_mode: "host".into(),
        volume_driver: "local".into(),
        volume_driver_ops: HashMap::from([
            ("type".into(), "tmpfs".into()),
            ("device".into(), "tmpfs".into()),
            ("o".into(), "size=16m".into()),
        ]),
        volumes: vec!["/fast-cache".into()],
        container_labels: HashMap::from([("com.example.team".into(), "$TEAM".into())]),
        log_options: HashMap::from([("labels".into(), "com.example.team".into())]),
        services: vec![RunnerService {
            name: busybox_image(),
            alias: "envsvc".into(),
            // The entrypoint is the runner's too: without it the command is no program.
            entrypoint: vec!["sh".into(), "-c".into()],
            command: vec![
                "mkdir -p /www && echo \"greeting=$SVC_GREETING\" > /www/index.html && exec httpd -f -p 6379 -h /www".into(),
            ],
            environment: vec!["SVC_GREETING=hello-from-the-runner".into()],
        }],
        ..DockerSettings::default()
    };
    let config = settings
        .build(&DockerContext {
            owner: "flotilla-keys".into(),
            ..DockerContext::default()
        })
        .expect("the settings build");
    let f = docker_fleet("keys", config).await;
    let mut j = job_at(
        Level::Docker,
        &[
            "echo \"dockerd_seen=$(cat /proc/[0-9]*/comm 2>/dev/null | grep -c '^dockerd$')\"",
            "echo \"cache_fs=$(grep ' /fast-cache ' /proc/mounts | cut -d' ' -f3)\"",
            "wget -qO- http://envsvc:6379/",
            // Time for the test to ask the engine about the build container.
            "sleep 4",
        ],
    );
    j.variables.push(Variable::new("TEAM", "blue"));
    // The build container, and the service with GitLab's prefixed copy of the label.
    let inspect = |label: &'static str| {
        let f = &f;
        async move {
            let filters = HashMap::from([("label".to_string(), vec![label.to_string()])]);
            for _ in 0..120 {
                for instance in f.instances() {
                    let docker = f.inner_docker(&instance).await;
                    let found = docker
                        .list_containers(Some(bollard::query_parameters::ListContainersOptions {
                            filters: Some(filters.clone()),
                            ..Default::default()
                        }))
                        .await
                        .unwrap_or_default();
                    if let Some(id) = found.into_iter().find_map(|c| c.id) {
                        return docker.inspect_container(&id, None).await.ok();
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            None
        }
    };
    let ((r, t), build, service) = tokio::join!(
        dispatch(&f.dispatcher, &j),
        inspect("flotilla.role=build"),
        inspect("com.gitlab.gitlab-runner.com.example.team"),
    );
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    let build = build.unwrap_or_else(|| panic!("no build container seen: {t}"));
    let service = service.unwrap_or_else(|| panic!("no labelled service container seen: {t}"));
    let service_labels = service.config.and_then(|c| c.labels).unwrap_or_default();
    assert_eq!(service_labels["com.example.team"], "blue");
    assert!(!t.contains("dockerd_seen=0\n"), "pid_mode host: {t}");
    assert!(t.contains("cache_fs=tmpfs\n"), "volume_driver_ops: {t}");
    assert!(t.contains("greeting=hello-from-the-runner"), "{t}");
    let labels = build.config.and_then(|c| c.labels).unwrap_or_default();
    assert_eq!(labels["com.example.team"], "blue");
    let host = build.host_config.expect("a host config");
    assert_eq!(host.pid_mode.as_deref(), Some("host"));
    assert_eq!(host.volume_driver.as_deref(), Some("local"));
    let log = host.log_config.expect("a log config");
    assert_eq!(log.typ.as_deref(), Some("json-file"));
    assert_eq!(log.config.unwrap_or_default()["labels"], "com.example.team");
}
