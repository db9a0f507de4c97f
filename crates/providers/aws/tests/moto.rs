//! The aws provider against moto's standalone server (`scripts/setup.d/aws.sh` installs it):
//! a launch template and an Auto Scaling group per test, on loopback only.
//!
//! What moto cannot show: its instances are `InService` at once (no `Pending`), are not
//! machines (nothing listens on their addresses), and its Instance Connect accepts any key.

use flotilla_fleet::{ConnectorConfig, FleetError, InstanceGroup, Secret, Settings, State};
use flotilla_provider_aws::retry::RetryPolicy;
use flotilla_provider_aws::{AwsGroup, AwsSettings, fixed_config};
use flotilla_testkit::infra::{Infra, require};
use flotilla_testkit::moto::{
    ACCESS_KEY, GroupSpec, Moto, REGION, SECRET_KEY, ThrottlingProxy, WINDOWS_AMI,
};
use std::time::{Duration, SystemTime};

fn group(endpoint: &str, name: &str) -> AwsGroup {
    AwsGroup::with_config(
        AwsSettings::new(name),
        fixed_config(endpoint, REGION, ACCESS_KEY, SECRET_KEY),
    )
    // Fast backoff: the proxy's throttles are counted, not timed.
    .with_retry_policy(RetryPolicy {
        max_attempts: 4,
        base: Duration::from_millis(5),
        cap: Duration::from_millis(20),
    })
}

async fn moto() -> Option<Moto> {
    if !require(Infra::Moto) {
        return None;
    }
    Some(Moto::start().await.expect("moto starts"))
}

fn ids_in(listing: &[flotilla_fleet::InstanceStatus], state: State) -> Vec<String> {
    let mut ids: Vec<String> = listing
        .iter()
        .filter(|s| s.state == state)
        .map(|s| s.id.clone())
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn infra_aws_increase_list_decrease_against_moto() {
    let Some(moto) = moto().await else { return };
    moto.create_group(&GroupSpec::new("ci", 5)).await.unwrap();
    let mut other = GroupSpec::new("someone-elses", 3);
    other.desired = 1;
    moto.create_group(&other).await.unwrap();

    let g = group(&moto.endpoint(), "ci");
    let info = g.init(&Settings::default()).await.unwrap();
    assert_eq!(info.id, "aws/us-east-1/ci");
    assert_eq!(info.max_size, 5);
    assert!(info.capabilities.adopts_preexisting);
    assert!(
        g.advice().is_empty(),
        "the group is set up as GitLab advises"
    );
    assert!(
        g.update().await.unwrap().is_empty(),
        "only this group's instances"
    );

    assert_eq!(g.increase(3).await.unwrap(), 3);
    assert_eq!(moto.desired_capacity("ci").await.unwrap(), 3);
    assert_eq!(g.increase(5).await.unwrap(), 2, "clamped to MaxSize 5");
    assert_eq!(g.increase(1).await.unwrap(), 0, "full");
    assert_eq!(moto.desired_capacity("ci").await.unwrap(), 5);

    let listing = g.update().await.unwrap();
    let running = ids_in(&listing, State::Running);
    assert_eq!(running.len(), 5, "{listing:?}");
    assert_eq!(running, moto.in_service("ci").await.unwrap());

    // Another group's instance is refused without being touched; an id no group holds is
    // gone already.
    let theirs = moto.in_service("someone-elses").await.unwrap();
    let asked = vec![
        running[0].clone(),
        running[1].clone(),
        theirs[0].clone(),
        "i-00000000000000000".to_string(),
    ];
    let done = g.decrease(&asked).await.unwrap();
    assert_eq!(done, [asked[0].clone(), asked[1].clone(), asked[3].clone()]);
    assert_eq!(moto.desired_capacity("ci").await.unwrap(), 3, "decremented");
    assert_eq!(moto.in_service("someone-elses").await.unwrap(), theirs);

    let listing = g.update().await.unwrap();
    let live: Vec<_> = listing.iter().filter(|s| s.state.is_live()).collect();
    assert_eq!(live.len(), 3, "{listing:?}");
    for gone in &asked[..2] {
        let st = listing.iter().find(|s| &s.id == gone).map(|s| s.state);
        assert!(
            matches!(st, Some(State::Deleting | State::Deleted)),
            "{gone}: {st:?}"
        );
    }
    // Whatever left the listing is reported deleted once, then no more.
    let again = g.update().await.unwrap();
    let again2 = g.update().await.unwrap();
    assert!(
        again2.iter().all(|s| s.state != State::Deleted),
        "{again:?} {again2:?}"
    );
    assert!(g.api_calls() > 0);
}

#[tokio::test]
async fn infra_aws_init_warns_with_the_fix_and_refuses_a_missing_group() {
    let Some(moto) = moto().await else { return };
    let mut spec = GroupSpec::new("careless", 4);
    spec.protected = false;
    spec.zones = vec![format!("{REGION}a"), format!("{REGION}b")];
    spec.scaling_policy = Some("scale-out".into());
    moto.create_group(&spec).await.unwrap();

    let g = group(&moto.endpoint(), "careless");
    g.init(&Settings::default()).await.unwrap();
    let advice: Vec<String> = g.advice().iter().map(ToString::to_string).collect();
    assert_eq!(advice.len(), 3, "{advice:#?}");
    assert!(
        advice[0].contains("--new-instances-protected-from-scale-in"),
        "{advice:#?}"
    );
    assert!(advice[1].contains("\"scale-out\"") && advice[1].contains("delete-policy"));
    assert!(advice[2].contains("AZRebalance"));

    let missing = group(&moto.endpoint(), "nope");
    let e = missing.init(&Settings::default()).await.unwrap_err();
    assert!(matches!(e, FleetError::Config(_)), "{e}");
    assert!(
        e.to_string()
            .contains("\"nope\" not found in region us-east-1"),
        "{e}"
    );
}

#[tokio::test]
async fn infra_aws_connect_info_pushes_a_fresh_instance_connect_key() {
    let Some(moto) = moto().await else { return };
    moto.create_group(&GroupSpec::new("keys", 2)).await.unwrap();
    let proxy = ThrottlingProxy::start(moto.addr()).await.unwrap();
    let g = group(&proxy.endpoint(), "keys");
    g.init(&Settings::default()).await.unwrap();
    g.increase(1).await.unwrap();
    let id = g.update().await.unwrap()[0].id.clone();

    // One throttled SendSSHPublicKey proves the call is made (and retried).
    proxy.throttle("SendSSHPublicKey", 1);
    let before = SystemTime::now();
    let info = g.connect_info(&id).await.unwrap();
    assert_eq!(proxy.throttled("SendSSHPublicKey"), 1);
    assert_eq!(info.id, id);
    assert_eq!(info.config.username, "ec2-user");
    assert_eq!(
        (info.config.os.as_str(), info.config.arch.as_str()),
        ("linux", "amd64")
    );
    assert!(!info.internal_addr.is_empty(), "the private address");
    let key = info.config.key.as_ref().expect("a minted key");
    assert!(
        String::from_utf8_lossy(key.expose()).contains("OPENSSH PRIVATE KEY"),
        "an OpenSSH private key"
    );
    assert!(
        !format!("{info:?}").contains("PRIVATE KEY"),
        "never printed"
    );
    let expires = info.expires.expect("Instance Connect keys expire");
    let lifetime = expires.duration_since(before).unwrap();
    assert!(
        lifetime <= Duration::from_secs(61) && lifetime >= Duration::from_secs(55),
        "{lifetime:?}"
    );
    // The SSH connector refreshes 30 s before expiry, so well within the 60 s.
    assert!(!info.expired(SystemTime::now(), Duration::from_secs(25)));
    assert!(info.expired(
        expires.checked_sub(Duration::from_secs(10)).unwrap(),
        Duration::from_secs(30)
    ));

    let again = g.connect_info(&id).await.unwrap();
    assert_ne!(
        again.config.key.as_ref().map(Secret::expose),
        Some(key.expose()),
        "a fresh key each time"
    );

    // Static credentials pass through, and nothing is pushed.
    let forwarded = proxy.forwarded();
    let fixed = AwsGroup::with_config(
        AwsSettings {
            test_address_override: Some("127.0.0.1:2222".into()),
            ..AwsSettings::new("keys")
        },
        fixed_config(&proxy.endpoint(), REGION, ACCESS_KEY, SECRET_KEY),
    );
    fixed
        .init(&Settings {
            connector: ConnectorConfig {
                use_static_credentials: true,
                username: "ubuntu".into(),
                password: Some(Secret::new("pw".into())),
                ..ConnectorConfig::default()
            },
        })
        .await
        .unwrap();
    let info = fixed.connect_info(&id).await.unwrap();
    assert_eq!(info.config.username, "ubuntu");
    assert_eq!(info.dial_addr(), "127.0.0.1:2222", "the test-only override");
    assert_eq!(info.expires, None);
    assert_eq!(info.config.key, None);
    // init: DescribeAutoScalingGroups, DescribePolicies; connect_info: DescribeInstances.
    assert_eq!(proxy.forwarded() - forwarded, 3, "no SendSSHPublicKey");

    let e = g.connect_info("i-0123456789abcdef0").await.unwrap_err();
    assert!(e.is_unhealthy(), "{e}");

    // Windows: EC2 says so. Without static credentials the password comes from
    // GetPasswordData, decrypted with the key pair's private key, which must be configured.
    let mut windows = GroupSpec::new("windows", 1);
    windows.image_id = WINDOWS_AMI.into();
    moto.create_group(&windows).await.unwrap();
    let w = group(&proxy.endpoint(), "windows");
    w.init(&Settings::default()).await.unwrap();
    w.increase(1).await.unwrap();
    let wid = w.update().await.unwrap()[0].id.clone();
    let e = w.connect_info(&wid).await.unwrap_err();
    assert!(matches!(e, FleetError::Config(_)), "{e}");
    assert!(e.to_string().contains("key_path"), "{e}");
    // With a key pair's key, GetPasswordData is called (once throttled, then retried). moto
    // answers with 128 random characters, not a ciphertext, so this says the key does not
    // fit; decryption itself is judged against OpenSSL in `password`'s tests.
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("openssl")
        .args(["genrsa", "-traditional", "-out"])
        .arg(dir.path().join("key.pem"))
        .arg("2048")
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "{out:?}");
    let pem = std::fs::read(dir.path().join("key.pem")).unwrap();
    let w = group(&proxy.endpoint(), "windows");
    w.init(&Settings {
        connector: ConnectorConfig {
            key: Some(Secret::new(pem)),
            ..ConnectorConfig::default()
        },
    })
    .await
    .unwrap();
    proxy.throttle("GetPasswordData", 1);
    let e = w.connect_info(&wid).await.unwrap_err();
    assert_eq!(proxy.throttled("GetPasswordData"), 1, "{e}");
    assert!(
        e.to_string().contains("does not decrypt with this key"),
        "{e}"
    );
    assert!(!e.to_string().contains("PRIVATE KEY"), "{e}");
    let w = group(&moto.endpoint(), "windows");
    w.init(&Settings {
        connector: ConnectorConfig {
            use_static_credentials: true,
            password: Some(Secret::new("pw".into())),
            ..ConnectorConfig::default()
        },
    })
    .await
    .unwrap();
    let info = w.connect_info(&wid).await.unwrap();
    assert_eq!(
        (info.config.os.as_str(), info.config.username.as_str()),
        ("windows", "Administrator")
    );
}

#[tokio::test]
async fn infra_aws_throttling_backs_off_and_loses_no_decision() {
    let Some(moto) = moto().await else { return };
    moto.create_group(&GroupSpec::new("busy", 6)).await.unwrap();
    let proxy = ThrottlingProxy::start(moto.addr()).await.unwrap();
    let g = group(&proxy.endpoint(), "busy");
    proxy.throttle("DescribeAutoScalingGroups", 2);
    g.init(&Settings::default()).await.unwrap();

    proxy.throttle("SetDesiredCapacity", 3);
    assert_eq!(
        g.increase(2).await.unwrap(),
        2,
        "throttled three times, then done"
    );
    assert_eq!(proxy.throttled("SetDesiredCapacity"), 3);
    assert_eq!(moto.desired_capacity("busy").await.unwrap(), 2);

    proxy.throttle("DescribeAutoScalingInstances", 2);
    let listing = g.update().await.unwrap();
    assert_eq!(ids_in(&listing, State::Running).len(), 2);

    // EC2 throttles with RequestLimitExceeded (HTTP 503).
    proxy.throttle("DescribeInstances", 2);
    g.connect_info(&listing[0].id).await.unwrap();
    assert_eq!(proxy.throttled("DescribeInstances"), 2);

    proxy.throttle("TerminateInstanceInAutoScalingGroup", 1);
    let done = g.decrease(&[listing[0].id.clone()]).await.unwrap();
    assert_eq!(done, [listing[0].id.clone()]);
    assert_eq!(moto.desired_capacity("busy").await.unwrap(), 1);

    // Throttled past every attempt: increase reports the error (the scaler asks again next
    // tick) and nothing changed; decrease does not claim the instance.
    proxy.throttle("SetDesiredCapacity", 4);
    let e = g.increase(1).await.unwrap_err();
    assert!(e.to_string().contains("Throttling"), "{e}");
    assert!(e.to_string().contains("after 4 attempts"), "{e}");
    assert_eq!(moto.desired_capacity("busy").await.unwrap(), 1);
    assert_eq!(
        g.increase(1).await.unwrap(),
        1,
        "the next tick's decision goes through"
    );
    assert_eq!(moto.desired_capacity("busy").await.unwrap(), 2);

    proxy.throttle("TerminateInstanceInAutoScalingGroup", 4);
    let survivor = listing[1].id.clone();
    assert_eq!(
        g.decrease(std::slice::from_ref(&survivor)).await.unwrap(),
        Vec::<String>::new()
    );
    assert!(moto.in_service("busy").await.unwrap().contains(&survivor));
    assert_eq!(
        g.decrease(std::slice::from_ref(&survivor)).await.unwrap(),
        [survivor]
    );
}

#[tokio::test]
async fn infra_aws_a_restarted_provider_adopts_the_groups_instances() {
    let Some(moto) = moto().await else { return };
    moto.create_group(&GroupSpec::new("kept", 4)).await.unwrap();
    let first = group(&moto.endpoint(), "kept");
    first.init(&Settings::default()).await.unwrap();
    assert_eq!(first.increase(2).await.unwrap(), 2);
    let before = ids_in(&first.update().await.unwrap(), State::Running);
    first.shutdown().await.unwrap();
    drop(first);
    assert_eq!(
        moto.in_service("kept").await.unwrap(),
        before,
        "shutdown deletes nothing"
    );

    // A new process knows nothing: the group is the listing of record.
    let second = group(&moto.endpoint(), "kept");
    let info = second.init(&Settings::default()).await.unwrap();
    assert!(info.capabilities.adopts_preexisting);
    assert_eq!(
        ids_in(&second.update().await.unwrap(), State::Running),
        before
    );
    // The desired capacity carried over too: increase counts from it.
    assert_eq!(second.increase(5).await.unwrap(), 2);
}
