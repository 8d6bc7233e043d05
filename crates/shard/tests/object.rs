//! Object residency's rules (`cobordism_shard::object`): which object serves a session, and
//! when the keep-warm alarm is set.

mod common;

use std::collections::HashMap;

use cobordism_protocol::ErrorCode;
use cobordism_shard::object::{
    forward_mismatch, probed_object, FORWARD_VERSION, KEEP_WARM_TICK_MS,
};
use cobordism_shard::{object_name, KeepWarm, Settings};
use common::settings;

fn replicas(n: u32) -> Settings {
    Settings {
        replicas: n,
        ..settings(8)
    }
}

#[test]
fn a_session_always_gets_the_same_replica_and_sessions_spread_over_all() {
    let cfg = replicas(4);
    assert_eq!(
        object_name(&cfg, None),
        "shard-0/0",
        "no session key: replica 0"
    );
    let mut by_replica = HashMap::new();
    for s in 0..400 {
        let key = format!("session-{s}");
        let name = object_name(&cfg, Some(&key));
        assert_eq!(name, object_name(&cfg, Some(&key)), "stable");
        *by_replica.entry(name).or_insert(0) += 1;
    }
    assert_eq!(by_replica.len(), 4, "{by_replica:?}");
    assert!(
        by_replica.values().all(|&n| (60..=140).contains(&n)),
        "{by_replica:?}"
    );
    let one = replicas(1);
    assert_eq!(object_name(&one, Some("anything")), "shard-0/0");
    let other_shard = Settings {
        shard_index: 5,
        ..replicas(4)
    };
    assert!(object_name(&other_shard, Some("a")).starts_with("shard-5/"));
}

#[test]
fn keep_warm_off_sets_no_alarm() {
    let (cfg, warm) = (replicas(1), KeepWarm::default());
    assert_eq!(warm.on_request("a", 0.0, &cfg), None);
    assert_eq!(warm.on_request("a", 1.0, &cfg), None);
}

#[test]
fn keep_warm_sets_one_alarm_at_a_time_and_stops_after_its_time() {
    let cfg = Settings {
        keep_warm_ms: 100_000.0,
        ..replicas(1)
    };
    let warm = KeepWarm::default();
    assert_eq!(warm.on_request("a", 0.0, &cfg), Some(KEEP_WARM_TICK_MS));
    assert_eq!(warm.on_request("a", 10.0, &cfg), None, "one is pending");
    let mut now = 10.0 + KEEP_WARM_TICK_MS;
    let mut alarms = 0;
    while let Some(next) = warm.on_alarm("a", now, &cfg) {
        alarms += 1;
        now += next;
    }
    // Alarms at 30, 60 and 90 s after the last request keep it; the one at 120 s lets it go.
    assert_eq!(alarms, 3);
    assert_eq!(
        warm.on_request("a", now, &cfg),
        Some(KEEP_WARM_TICK_MS),
        "a new session"
    );
}

#[test]
fn objects_in_one_isolate_keep_their_own_schedules() {
    let cfg = Settings {
        keep_warm_ms: 100_000.0,
        ..replicas(2)
    };
    let warm = KeepWarm::default();
    assert_eq!(warm.on_request("a", 0.0, &cfg), Some(KEEP_WARM_TICK_MS));
    assert_eq!(
        warm.on_request("b", 5.0, &cfg),
        Some(KEEP_WARM_TICK_MS),
        "b's alarm is its own, whatever a's is"
    );
    assert_eq!(
        warm.on_request("b", 200_000.0, &cfg),
        None,
        "b's is pending"
    );
    assert_eq!(
        warm.on_alarm("a", 200_001.0, &cfg),
        None,
        "a's last request is old"
    );
    assert_eq!(
        warm.on_alarm("b", 200_001.0, &cfg),
        Some(KEEP_WARM_TICK_MS),
        "b's is recent"
    );
    warm.alarm_failed("b");
    assert_eq!(
        warm.on_request("b", 200_002.0, &cfg),
        Some(KEEP_WARM_TICK_MS),
        "a failed alarm is asked for again"
    );
}

#[test]
fn an_alarm_for_an_object_without_a_request_here_lets_it_go() {
    let cfg = Settings {
        keep_warm_ms: 100_000.0,
        ..replicas(1)
    };
    assert_eq!(KeepWarm::default().on_alarm("a", 1.0, &cfg), None);
}

#[test]
fn a_forward_of_another_version_is_a_retryable_error_naming_both_builds() {
    let ours = FORWARD_VERSION.to_string();
    let this = ("1.0.0", FORWARD_VERSION);
    assert!(forward_mismatch(Some(&ours), this, Some("1.0.0")).is_none());
    assert!(forward_mismatch(Some(&format!(" {ours} ")), this, None).is_none());
    let playing_next = ("1.0.0+test", FORWARD_VERSION + 1);
    assert!(forward_mismatch(Some(&ours), playing_next, None).is_some());
    let next = (FORWARD_VERSION + 1).to_string();
    for (theirs, build, said) in [
        (
            Some(next.as_str()),
            Some("2.0.0"),
            format!("build 2.0.0, forward version {next}"),
        ),
        (
            None,
            None,
            "build an older build, no forward version".into(),
        ),
        (
            Some("x"),
            Some("0.9"),
            "build 0.9, forward version x".into(),
        ),
    ] {
        let e = forward_mismatch(theirs, this, build).expect("refused");
        assert_eq!(e.code, ErrorCode::BuildMismatch);
        assert!(e.code.retry_after().is_some(), "retryable");
        let internal = e.to_string();
        assert!(internal.contains("this side: build 1.0.0"), "{internal}");
        assert!(internal.contains(&said), "{internal} should say {said}");
    }
}

#[test]
fn a_probe_names_its_replica_else_follows_its_session() {
    let cfg = replicas(3);
    assert_eq!(probed_object(&cfg, None, None).unwrap(), "shard-0/0");
    let session = Some("session-7");
    let followed = probed_object(&cfg, None, session).unwrap();
    assert_eq!(followed, object_name(&cfg, session));
    assert_eq!(
        probed_object(&cfg, Some("2"), session).unwrap(),
        "shard-0/2"
    );
    for bad in ["3", "-1", "x", ""] {
        let e = probed_object(&cfg, Some(bad), None).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadQuery, "{bad:?}");
        assert!(
            e.detail.contains("from 0 to 2 (REPLICAS is 3)"),
            "{}",
            e.detail
        );
    }
    assert!(probed_object(&replicas(1), Some("1"), None).is_err());
}
