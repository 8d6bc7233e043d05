//! Helpers shared by the CLI tests: running the binary and making small GGUF files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cobordism::gguf::{Gguf, GgufWriter, MetaValue};
use cobordism::lm_head::LmHead;
use kquant::synth::SplitMix64;

/// Runs the binary with `args` in `dir`.
pub fn run_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cobordism"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the binary runs")
}

/// Runs the binary in `dir` with `line` split on whitespace (for arguments without spaces).
pub fn cli(dir: &Path, line: &str) -> Output {
    run_in(dir, &line.split_whitespace().collect::<Vec<_>>())
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts success and returns stdout.
pub fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "expected success, got {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

/// Asserts failure with exit `code` (no panic) and that stderr mentions every needle.
pub fn fails(o: Output, code: i32, needles: &[&str]) -> String {
    let err = stderr(&o);
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{err}",
        stdout(&o)
    );
    assert!(!err.contains("panicked"), "panic: {err}");
    assert!(err.starts_with("error: "), "{err}");
    for n in needles {
        assert!(err.contains(n), "stderr should mention {n:?}:\n{err}");
    }
    err
}

/// `cobordism synth --shape tiny --type q6_k` (512 × 4096) into `dir/name`, with extra
/// arguments (which may give another `--type`).
pub fn synth(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let mut args = vec!["synth", "--out", name, "--shape", "tiny", "--seed", "5"];
    if !extra.contains(&"--type") {
        args.extend(["--type", "q6_k"]);
    }
    args.extend(extra);
    ok(run_in(dir, &args));
    dir.join(name)
}

/// The lm-head's raw bytes and header info.
pub fn tensor_bytes(gguf: &Path) -> (LmHead, Vec<u8>) {
    let head = LmHead::find(&Gguf::open(gguf).unwrap(), None).unwrap();
    let file = std::fs::read(gguf).unwrap();
    let start = head.data_offset as usize;
    let bytes = file[start..start + head.total_bytes() as usize].to_vec();
    (head, bytes)
}

/// The hidden vector `--seed seed` stands for.
pub fn seeded_hidden(seed: u64, hidden: usize) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    (0..hidden).map(|_| rng.normal()).collect()
}

/// Writes a GGUF file with one tensor of zeros of the right size for its type.
pub fn write_gguf(
    path: &Path,
    meta: &[(&str, MetaValue)],
    tensor: &str,
    dims: &[u64],
    ty: u32,
    bytes: usize,
) {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", MetaValue::Str("llama".into()));
    for (k, v) in meta {
        w.kv(k, v.clone());
    }
    w.tensor(tensor, dims, ty, bytes as u64);
    let mut out = Vec::new();
    w.write_all(&mut out, &[&vec![0u8; bytes]]).unwrap();
    std::fs::write(path, out).unwrap();
}

/// The file of shard `index`'s slice in the slice directory `dir` (keys carry checksums).
pub fn slice_path(dir: &Path, index: usize) -> PathBuf {
    let json = std::fs::read(dir.join("manifest.json")).unwrap();
    let m = cobordism_protocol::Manifest::parse(&json).unwrap();
    dir.join(&m.shards[index].key)
}
