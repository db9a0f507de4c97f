//! Bug 6: a policy without a time zone, or with `"Local"`, reads its periods in the system's
//! local time, as GitLab's configuration documentation says ("timezone: default: system
//! local"; fleeting-taskscaler-nesting.md §2.6).
//!
//! The system's zone is set through `TZ` for this process only; this file holds one test so
//! that no other test runs beside the change (each integration-test file is its own
//! process, and nextest runs every test in a process of its own).

use chrono::{TimeZone, Utc};
use flotilla_scaler::{Policy, ScheduledPolicy};

#[test]
fn unset_and_local_time_zones_mean_the_systems_local_time() {
    // SAFETY: this test binary has no other test and starts no thread before this point.
    // A POSIX rule rather than a zone name: it needs no tz database on the host.
    unsafe { std::env::set_var("TZ", "EST5EDT,M3.2.0,M11.1.0") };
    let business_hours = ["* 8-16 * * mon-fri".to_string()];
    let unset = ScheduledPolicy::new(Policy::default(), &business_hours, None).unwrap();
    let local = ScheduledPolicy::new(Policy::default(), &business_hours, Some("Local"))
        .expect("\"Local\" is accepted");
    // Monday 2026-11-23 13:30 UTC is 08:30 in New York (EST, UTC-5): inside the period.
    let in_ny_morning = Utc.with_ymd_and_hms(2026, 11, 23, 13, 30, 0).unwrap();
    // 08:30 UTC is 03:30 in New York: outside.
    let in_ny_night = Utc.with_ymd_and_hms(2026, 11, 23, 8, 30, 0).unwrap();
    for p in [&unset, &local] {
        assert!(p.is_active(in_ny_morning));
        assert!(!p.is_active(in_ny_night));
    }
    // An explicit zone is unaffected.
    let utc = ScheduledPolicy::new(Policy::default(), &business_hours, Some("UTC")).unwrap();
    assert!(utc.is_active(in_ny_night));
}
