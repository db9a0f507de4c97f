//! The docker provider against the real Docker engine and the offline instance image.

use flotilla_fleet::{ConnectorConfig, FleetError, InstanceGroup, InstanceStatus, Settings, State};
use flotilla_provider_docker::{DockerGroup, DockerSettings, GROUP_LABEL, GroupKey};
use flotilla_testkit::containers::LabelGuard;
use flotilla_testkit::images::instance_image;
use flotilla_testkit::infra::{Infra, require};
use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

/// Removes every container of a group when dropped, even when the test failed.
fn cleanup(group: &str) -> LabelGuard {
    LabelGuard::new(format!("{GROUP_LABEL}={group}"))
}

fn unique(name: &str) -> String {
    format!("t{}-{name}", std::process::id())
}

async fn group(name: &str, settings: Settings) -> (DockerGroup, LabelGuard) {
    let group = DockerGroup::new(DockerSettings::new(name, instance_image())).unwrap();
    let info = group.init(&settings).await.unwrap();
    assert_eq!(info.id, format!("docker/{name}"));
    assert!(info.build_info.contains("API"), "{}", info.build_info);
    (group, cleanup(name))
}

/// Polls `update` until `done` holds (failing the test after two minutes).
async fn wait_until(
    g: &DockerGroup,
    what: &str,
    done: impl Fn(&[InstanceStatus]) -> bool,
) -> Vec<InstanceStatus> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let listing = g.update().await.unwrap();
        if done(&listing) {
            return listing;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}; last listing: {listing:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn count(listing: &[InstanceStatus], state: State) -> usize {
    listing.iter().filter(|s| s.state == state).count()
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn infra_scales_up_to_five_and_down_to_zero() {
    if !require(Infra::Docker) {
        return;
    }
    let name = unique("scale");
    let (g, _cleanup) = group(&name, Settings::default()).await;
    assert!(g.update().await.unwrap().is_empty());

    assert_eq!(g.increase(5).await.unwrap(), 5);
    let listing = wait_until(&g, "five running instances", |l| {
        l.len() == 5 && count(l, State::Running) == 5
    })
    .await;

    let mut ports = HashSet::new();
    for s in &listing {
        g.heartbeat(&s.id).await.unwrap();
        let ci = g.connect_info(&s.id).await.unwrap();
        assert_eq!(ci.id, s.id);
        assert_eq!(ci.external_addr, ci.internal_addr);
        assert!(
            ci.internal_addr.starts_with("127.0.0.1:"),
            "{}",
            ci.internal_addr
        );
        assert_eq!(ci.config.username, "root");
        assert!(ci.config.key.is_some(), "the group's generated key");
        ports.insert(ci.internal_addr.clone());
        // Published on loopback only.
        let published = docker(&["port", &s.id, "22/tcp"]);
        assert!(
            published.lines().all(|l| l.starts_with("127.0.0.1:")),
            "{published}"
        );
    }
    assert_eq!(ports.len(), 5, "every instance has its own port");

    let ids: Vec<String> = listing.iter().map(|s| s.id.clone()).collect();
    let removed = g.decrease(&ids).await.unwrap();
    assert_eq!(
        removed.iter().collect::<HashSet<_>>(),
        ids.iter().collect::<HashSet<_>>()
    );
    // Gone instances are reported deleted once, then leave the listing.
    let after = g.update().await.unwrap();
    assert_eq!(count(&after, State::Deleted), 5, "{after:?}");
    wait_until(&g, "an empty listing", |l| l.is_empty()).await;
    let left = docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label={GROUP_LABEL}={name}"),
    ]);
    assert!(left.is_empty(), "containers left: {left}");
    g.shutdown().await.unwrap();
}

#[tokio::test]
async fn infra_max_size_clips_increase() {
    if !require(Infra::Docker) {
        return;
    }
    let name = unique("max");
    let mut settings = DockerSettings::new(&name, instance_image());
    settings.max_size = 2;
    let g = DockerGroup::new(settings).unwrap();
    let _cleanup = cleanup(&name);
    g.init(&Settings::default()).await.unwrap();
    assert_eq!(g.increase(3).await.unwrap(), 2);
    assert_eq!(g.increase(1).await.unwrap(), 0, "full");
    assert_eq!(g.update().await.unwrap().len(), 2);
}

#[tokio::test]
async fn infra_removed_from_outside_shows_as_deleted() {
    if !require(Infra::Docker) {
        return;
    }
    let name = unique("outside");
    let (g, _cleanup) = group(&name, Settings::default()).await;
    assert_eq!(g.increase(2).await.unwrap(), 2);
    let listing = wait_until(&g, "two running", |l| count(l, State::Running) == 2).await;
    let victim = listing[0].id.clone();
    let survivor = listing[1].id.clone();

    docker(&["rm", "-f", "-v", &victim]);
    let after = g.update().await.unwrap();
    assert!(
        after.contains(&InstanceStatus::new(victim.clone(), State::Deleted)),
        "{after:?}"
    );
    assert!(after.contains(&InstanceStatus::new(survivor.clone(), State::Running)));
    let later = g.update().await.unwrap();
    assert!(
        !later.iter().any(|s| s.id == victim),
        "reported once: {later:?}"
    );
    assert!(matches!(
        g.heartbeat(&victim).await,
        Err(FleetError::InstanceNotFound(_))
    ));
    assert!(matches!(
        g.connect_info(&victim).await,
        Err(FleetError::InstanceNotFound(_))
    ));
    // Deleting what is already gone succeeds.
    assert_eq!(
        g.decrease(std::slice::from_ref(&victim)).await.unwrap(),
        vec![victim]
    );
}

#[tokio::test]
async fn infra_stopped_and_paused_instances() {
    if !require(Infra::Docker) {
        return;
    }
    let name = unique("states");
    let (g, _cleanup) = group(&name, Settings::default()).await;
    assert_eq!(g.increase(2).await.unwrap(), 2);
    let listing = wait_until(&g, "two running", |l| count(l, State::Running) == 2).await;
    let (stopped, paused) = (listing[0].id.clone(), listing[1].id.clone());

    docker(&["kill", &stopped]);
    docker(&["pause", &paused]);
    let after = wait_until(&g, "the killed one in timeout", |l| {
        l.contains(&InstanceStatus::new(stopped.clone(), State::Timeout))
    })
    .await;
    assert!(after.contains(&InstanceStatus::new(paused.clone(), State::Running)));
    for id in [&stopped, &paused] {
        let e = g.heartbeat(id).await.unwrap_err();
        assert!(matches!(e, FleetError::InstanceUnhealthy { .. }), "{e}");
    }
    docker(&["unpause", &paused]);
    g.heartbeat(&paused).await.unwrap();
    assert_eq!(
        g.decrease(std::slice::from_ref(&stopped)).await.unwrap(),
        vec![stopped]
    );
}

#[tokio::test]
async fn infra_groups_never_see_each_other() {
    if !require(Infra::Docker) {
        return;
    }
    let (a, _ca) = group(&unique("iso-a"), Settings::default()).await;
    let (b, _cb) = group(&unique("iso-b"), Settings::default()).await;
    assert_eq!(a.increase(2).await.unwrap(), 2);
    assert_eq!(b.increase(1).await.unwrap(), 1);
    let la = wait_until(&a, "a's two", |l| count(l, State::Running) == 2).await;
    let lb = wait_until(&b, "b's one", |l| count(l, State::Running) == 1).await;
    let ida: HashSet<_> = la.iter().map(|s| s.id.clone()).collect();
    let idb: HashSet<_> = lb.iter().map(|s| s.id.clone()).collect();
    assert_eq!(ida.len(), 2);
    assert_eq!(idb.len(), 1);
    assert!(ida.is_disjoint(&idb));

    let foreign = la[0].id.clone();
    assert!(
        b.decrease(std::slice::from_ref(&foreign))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        b.connect_info(&foreign).await,
        Err(FleetError::InstanceNotFound(_))
    ));
    assert!(matches!(
        b.heartbeat(&foreign).await,
        Err(FleetError::InstanceNotFound(_))
    ));
    a.heartbeat(&foreign).await.unwrap();
    assert_eq!(
        a.update().await.unwrap().len(),
        2,
        "b's decrease did not touch a"
    );
}

#[tokio::test]
async fn infra_generated_and_static_keys_are_installed() {
    if !require(Infra::Docker) {
        return;
    }
    // Generated: one key per group, its public half in every instance.
    let (g, _c1) = group(&unique("genkey"), Settings::default()).await;
    assert_eq!(g.increase(2).await.unwrap(), 2);
    let listing = wait_until(&g, "two running", |l| count(l, State::Running) == 2).await;
    let mut keys = HashSet::new();
    for s in &listing {
        let ci = g.connect_info(&s.id).await.unwrap();
        let public = GroupKey::parse(ci.config.key.as_ref().unwrap().expose())
            .unwrap()
            .public_openssh;
        let installed = docker(&["exec", &s.id, "cat", "/root/.ssh/authorized_keys"]);
        assert_eq!(installed, public);
        keys.insert(public);
    }
    assert_eq!(keys.len(), 1, "one key per group");

    // Static: the user's key is passed through unchanged and installed.
    let mine = GroupKey::generate("test").unwrap();
    let settings = Settings {
        connector: ConnectorConfig {
            username: "root".into(),
            key: Some(mine.private_openssh.clone()),
            use_static_credentials: true,
            ..Default::default()
        },
    };
    let (s, _c2) = group(&unique("statickey"), settings).await;
    assert_eq!(s.increase(1).await.unwrap(), 1);
    let listing = wait_until(&s, "one running", |l| count(l, State::Running) == 1).await;
    let ci = s.connect_info(&listing[0].id).await.unwrap();
    assert_eq!(ci.config.key.as_ref().unwrap(), &mine.private_openssh);
    let installed = docker(&["exec", &listing[0].id, "cat", "/root/.ssh/authorized_keys"]);
    assert_eq!(installed, mine.public_openssh);
}
