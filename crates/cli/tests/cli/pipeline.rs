//! synth → plan → slice → logits --local → upload, on the tiny shape.

use std::fs;

use crate::common::*;
use cobordism_protocol::{Checksum, Manifest};
use kquant::QMatrix;

#[test]
fn plan_says_whether_slices_fit() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = synth(dir.path(), "tiny.gguf", &[]);
    let gguf = gguf.to_str().unwrap();

    let out = ok(run_in(
        dir.path(),
        &["plan", "--gguf", gguf, "--shards", "3"],
    ));
    assert!(out.contains("0..1366"), "{out}");
    assert!(out.contains("2731..4096"), "{out}");
    assert!(out.contains("all 3 shard slices fit"), "{out}");

    // 4096 rows × 420 bytes = 1.64 MiB: one shard is over 1 MiB, two are not.
    fails(
        run_in(
            dir.path(),
            &["plan", "--gguf", gguf, "--shards", "1", "--budget-mib", "1"],
        ),
        3,
        &[
            "do not fit in 1 MiB",
            "smallest shard count that fits is 2",
            "--shards 2",
        ],
    );
    fails(
        run_in(
            dir.path(),
            &[
                "slice",
                "--gguf",
                gguf,
                "--shards",
                "1",
                "--budget-mib",
                "1",
                "--out",
                "s",
            ],
        ),
        3,
        &["smallest shard count that fits is 2"],
    );
    assert!(!dir.path().join("s/manifest.json").exists());
    fails(
        run_in(dir.path(), &["plan", "--gguf", gguf, "--shards", "0"]),
        1,
        &["--shards 0"],
    );
}

#[test]
fn slices_are_the_tensor_cut_by_rows() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = synth(dir.path(), "tiny.gguf", &["--softcap", "30", "--tied"]);
    let (head, tensor) = tensor_bytes(&gguf);
    assert_eq!(head.tensor, "token_embd.weight");
    ok(run_in(
        dir.path(),
        &[
            "slice",
            "--gguf",
            gguf.to_str().unwrap(),
            "--shards",
            "3",
            "--out",
            "s",
        ],
    ));

    let m = Manifest::parse(&fs::read(dir.path().join("s/manifest.json")).unwrap()).unwrap();
    assert_eq!((m.hidden, m.vocab, m.shard_count), (512, 4096, 3));
    assert_eq!(
        (m.dtype.as_str(), m.tensor.as_str()),
        ("q6_k", "token_embd.weight")
    );
    assert_eq!(m.model, "synth-tiny-q6_k");
    assert_eq!(m.softcap, Some(30.0));
    assert_eq!(m.version, Manifest::content_version(&m.shards));
    let mut joined = Vec::new();
    for s in &m.shards {
        let bytes = fs::read(dir.path().join("s").join(&s.key)).unwrap();
        assert_eq!(bytes.len() as u64, s.bytes);
        assert_eq!(Checksum::of(&bytes), s.checksum);
        joined.extend(bytes);
    }
    assert!(joined == tensor, "the slices differ from the tensor");

    // A second run refuses to overwrite, unless --force.
    let again = [
        "slice",
        "--gguf",
        gguf.to_str().unwrap(),
        "--shards",
        "3",
        "--out",
        "s",
    ];
    fails(
        run_in(dir.path(), &again),
        1,
        &["already exists", "--force"],
    );
    ok(run_in(dir.path(), &[&again[..], &["--force"]].concat()));
}

#[test]
fn local_logits_are_deterministic_and_equal_a_direct_mat_vec() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = synth(dir.path(), "tiny.gguf", &[]);
    let (head, tensor) = tensor_bytes(&gguf);
    ok(run_in(
        dir.path(),
        &[
            "slice",
            "--gguf",
            gguf.to_str().unwrap(),
            "--shards",
            "3",
            "--out",
            "s",
        ],
    ));
    let logits = |out: &str| {
        let stdout = ok(run_in(
            dir.path(),
            &[
                "logits",
                "--manifest",
                "s/manifest.json",
                "--local",
                "--seed",
                "9",
                "--top-k",
                "4",
                "--out",
                out,
            ],
        ));
        (stdout, fs::read(dir.path().join(out)).unwrap())
    };
    let (table, a) = logits("a.f32");
    let (_, b) = logits("b.f32");
    assert_eq!(a, b);

    let x = seeded_hidden(9, head.hidden);
    let mut want = vec![0.0f32; head.vocab];
    QMatrix::new(head.ty, &tensor, head.vocab, head.hidden)
        .unwrap()
        .mat_vec(&x, &mut want)
        .unwrap();
    assert_eq!(a, cobordism_protocol::encode_f32(&want));

    let top = cobordism_protocol::TopK::compute(&want, 0, 4);
    let first = table
        .lines()
        .find(|l| l.trim_start().starts_with("1 "))
        .unwrap();
    assert!(first.contains(&top.entries[0].0.to_string()), "{table}");
    assert_eq!(
        table
            .lines()
            .filter(|l| l.trim_start().starts_with(char::is_numeric))
            .count(),
        4
    );

    // A corrupted slice is caught by its checksum.
    let slice = dir.path().join("s/shard-01.bin");
    let mut bytes = fs::read(&slice).unwrap();
    bytes[7] ^= 1;
    fs::write(&slice, bytes).unwrap();
    fails(
        run_in(
            dir.path(),
            &[
                "logits",
                "--manifest",
                "s/manifest.json",
                "--local",
                "--seed",
                "9",
            ],
        ),
        1,
        &["shard 1", "checksum"],
    );
}

#[test]
fn hidden_files_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = synth(dir.path(), "tiny.gguf", &[]);
    ok(run_in(
        dir.path(),
        &[
            "slice",
            "--gguf",
            gguf.to_str().unwrap(),
            "--shards",
            "1",
            "--out",
            "s",
        ],
    ));
    let x = seeded_hidden(3, 512);
    fs::write(dir.path().join("h.f32"), cobordism_protocol::encode_f32(&x)).unwrap();
    let from_file = ok(run_in(
        dir.path(),
        &[
            "logits",
            "--manifest",
            "s/manifest.json",
            "--local",
            "--hidden",
            "h.f32",
        ],
    ));
    let from_seed = ok(run_in(
        dir.path(),
        &[
            "logits",
            "--manifest",
            "s/manifest.json",
            "--local",
            "--seed",
            "3",
        ],
    ));
    assert_eq!(from_file, from_seed);

    fs::write(dir.path().join("short.f32"), [0u8; 100]).unwrap();
    fails(
        run_in(
            dir.path(),
            &[
                "logits",
                "--manifest",
                "s/manifest.json",
                "--local",
                "--hidden",
                "short.f32",
            ],
        ),
        1,
        &["short.f32", "100 bytes", "expected 2048"],
    );
}

#[cfg(unix)]
#[test]
fn upload_checks_slices_then_puts_the_manifest_last() {
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().unwrap();
    let gguf = synth(dir.path(), "tiny.gguf", &[]);
    ok(run_in(
        dir.path(),
        &[
            "slice",
            "--gguf",
            gguf.to_str().unwrap(),
            "--shards",
            "2",
            "--out",
            "s",
        ],
    ));
    let log = dir.path().join("calls.log");
    let fake = dir.path().join("fake-wrangler");
    fs::write(
        &fake,
        format!("#!/bin/sh\necho \"$@\" >> {}\n", log.display()),
    )
    .unwrap();
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();

    let upload = |extra: &[&str], wrangler: &str| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cobordism"));
        cmd.args(["upload", "--dir", "s", "--bucket", "lm"])
            .args(extra);
        cmd.current_dir(dir.path())
            .env("COBORDISM_WRANGLER", wrangler);
        cmd.output().unwrap()
    };
    ok(upload(
        &["--local", "--persist-to", "state"],
        fake.to_str().unwrap(),
    ));
    let calls = fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = calls.lines().collect();
    assert_eq!(lines.len(), 4, "{calls}");
    assert_eq!(lines[0], "--version");
    let state = dir.path().join("state");
    for (line, key) in lines[1..]
        .iter()
        .zip(["shard-00.bin", "shard-01.bin", "manifest.json"])
    {
        assert!(
            line.starts_with(&format!("r2 object put lm/synth-tiny-q6_k/{key} --file ")),
            "{line}"
        );
        assert!(
            line.ends_with(&format!("--local --persist-to {}", state.display())),
            "{line}"
        );
    }

    fs::remove_file(&log).unwrap();
    ok(upload(
        &["--remote", "--prefix", "models/tiny"],
        fake.to_str().unwrap(),
    ));
    let calls = fs::read_to_string(&log).unwrap();
    assert!(
        calls.contains("put lm/models/tiny/manifest.json"),
        "{calls}"
    );
    assert!(
        calls.lines().last().unwrap().ends_with("--remote"),
        "{calls}"
    );

    fails(
        upload(&["--local"], "/nonexistent/wrangler"),
        1,
        &["npm ci"],
    );
    assert_eq!(
        upload(&["--local", "--remote"], fake.to_str().unwrap())
            .status
            .code(),
        Some(2)
    );

    // A slice that does not match the manifest stops the upload before anything is put.
    fs::remove_file(&log).unwrap();
    fs::write(dir.path().join("s/shard-01.bin"), b"short").unwrap();
    fails(
        upload(&["--local"], fake.to_str().unwrap()),
        1,
        &["shard 1", "5 bytes"],
    );
    assert!(!log.exists());
}
