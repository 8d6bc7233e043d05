//! `Settings::from_vars`: the Worker's variables, their defaults, ranges and errors (the Worker
//! only hands its environment over).

use cobordism_shard::{ResidencyMode, Settings, ShardError};

/// The settings from `vars` (`NAME=value` pairs).
fn from(vars: &[(&str, &str)]) -> Result<Settings, ShardError> {
    Settings::from_vars(|name| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    })
}

const REQUIRED: [(&str, &str); 3] = [
    ("SHARD_INDEX", "2"),
    ("SHARD_COUNT", "8"),
    ("MODEL_PREFIX", "models/qwen/"),
];

/// The variables `REQUIRED` with `extra` added or replacing theirs.
fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut vars: Vec<_> = REQUIRED
        .iter()
        .filter(|(k, _)| !extra.iter().any(|(e, _)| e == k))
        .copied()
        .collect();
    vars.extend_from_slice(extra);
    vars
}

/// The `misconfigured` error and what it tells the operator.
fn refused(vars: &[(&str, &str)]) -> String {
    let e = from(vars).expect_err("accepted");
    assert_eq!(
        (e.status(), e.code.name(), e.retry_after()),
        (503, "misconfigured", None)
    );
    assert!(
        !e.detail.contains("SHARD") && !e.detail.contains("LOAD"),
        "{}",
        e.detail
    );
    e.internal.expect("the operator's reason")
}

#[test]
fn the_defaults_fill_what_is_not_set() {
    let s = from(&REQUIRED).unwrap();
    assert_eq!(
        s,
        Settings {
            shard_index: 2,
            shard_count: 8,
            prefix: "models/qwen".into(),
            budget_bytes: 100 << 20,
            manifest_ttl_ms: 5000.0,
            load_retry_ms: 2000.0,
            load_stall_ms: 15000.0,
            load_streams: 4,
            coalesce: true,
            residency: ResidencyMode::Isolate,
            replicas: 1,
            keep_warm_ms: 0.0,
        }
    );
    assert_eq!(s.manifest_key(), "models/qwen/manifest.json");
}

#[test]
fn every_setting_is_read_with_white_space_around_numbers() {
    let s = from(&with(&[
        ("MEMORY_BUDGET_MIB", " 120 "),
        ("MANIFEST_TTL_MS", "0"),
        ("LOAD_RETRY_MS", "250.5"),
        ("LOAD_STALL_MS", "900"),
        ("LOAD_STREAMS", "6"),
        ("COALESCE", " 0 "),
    ]))
    .unwrap();
    assert_eq!(s.budget_bytes, 120 << 20);
    assert_eq!(
        (s.manifest_ttl_ms, s.load_retry_ms, s.load_stall_ms),
        (0.0, 250.5, 900.0)
    );
    assert_eq!((s.load_streams, s.coalesce), (6, false));
    assert!(from(&with(&[("COALESCE", "1")])).unwrap().coalesce);
    let object = from(&with(&[
        ("RESIDENCY", " object "),
        ("REPLICAS", "3"),
        ("KEEP_WARM_S", "600"),
    ]))
    .unwrap();
    assert_eq!(
        (object.residency, object.replicas, object.keep_warm_ms),
        (ResidencyMode::Object, 3, 600_000.0)
    );
}

#[test]
fn missing_required_variables_are_named_for_the_operator() {
    for missing in ["SHARD_INDEX", "SHARD_COUNT", "MODEL_PREFIX"] {
        let vars: Vec<_> = REQUIRED
            .iter()
            .filter(|(k, _)| *k != missing)
            .copied()
            .collect();
        assert!(refused(&vars).contains(missing), "{missing}");
    }
}

#[test]
fn values_out_of_range_or_not_numbers_are_refused() {
    let cases: [(&[(&str, &str)], &str); 12] = [
        (&[("SHARD_INDEX", "8")], "not below SHARD_COUNT 8"),
        (&[("SHARD_INDEX", "-1")], "SHARD_INDEX = \"-1\""),
        (&[("SHARD_COUNT", "eight")], "SHARD_COUNT = \"eight\""),
        (&[("LOAD_STREAMS", "0")], "LOAD_STREAMS 0 is not in 1…6"),
        (&[("LOAD_STREAMS", "7")], "LOAD_STREAMS 7 is not in 1…6"),
        (
            &[("MEMORY_BUDGET_MIB", "18446744073709551615")],
            "is absurd",
        ),
        (
            &[("MEMORY_BUDGET_MIB", "1.5")],
            "MEMORY_BUDGET_MIB = \"1.5\"",
        ),
        (&[("MANIFEST_TTL_MS", "soon")], "MANIFEST_TTL_MS = \"soon\""),
        (&[("RESIDENCY", "durable")], "RESIDENCY = \"durable\""),
        (&[("REPLICAS", "0")], "REPLICAS 0 is not in 1…64"),
        (&[("REPLICAS", "65")], "REPLICAS 65 is not in 1…64"),
        (&[("KEEP_WARM_S", "-1")], "KEEP_WARM_S -1 is not in 0…86400"),
    ];
    for (extra, why) in cases {
        let internal = refused(&with(extra));
        assert!(internal.contains(why), "{extra:?}: {internal}");
    }
}
