//! Every malformed GGUF file is refused with a message naming the file and what was expected,
//! and a non-zero exit code, never a panic.

use std::fs;
use std::path::Path;

use cobordism::gguf::MetaValue;

use crate::common::*;

fn plan(dir: &Path, file: &str) -> std::process::Output {
    run_in(dir, &["plan", "--gguf", file, "--shards", "1"])
}

fn patch(path: &Path, at: usize, bytes: &[u8]) {
    let mut b = fs::read(path).unwrap();
    b[at..at + bytes.len()].copy_from_slice(bytes);
    fs::write(path, b).unwrap();
}

#[test]
fn truncated_files_are_refused_at_every_length() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = synth(dir.path(), "tiny.gguf", &[]);
    let full = fs::read(&gguf).unwrap();
    let (head, _) = tensor_bytes(&gguf);
    let data = head.data_offset as usize;
    let cut = dir.path().join("cut.gguf");
    for len in [
        0,
        3,
        4,
        7,
        20,
        24,
        40,
        100,
        data - 1,
        data,
        data + 1000,
        full.len() - 1,
    ] {
        fs::write(&cut, &full[..len]).unwrap();
        let err = fails(plan(dir.path(), "cut.gguf"), 1, &["cut.gguf"]);
        assert!(
            ["truncated", "corrupt", "shorter than"]
                .iter()
                .any(|w| err.contains(w)),
            "length {len}: {err}"
        );
    }
    fails(
        run_in(
            dir.path(),
            &["slice", "--gguf", "cut.gguf", "--shards", "2", "--out", "s"],
        ),
        1,
        &["extends past the end of the file"],
    );
    assert!(!dir.path().join("s").exists());
}

#[test]
fn wrong_magic_and_versions() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("zip.gguf"),
        b"PK\x03\x04 definitely not a model",
    )
    .unwrap();
    fails(
        plan(dir.path(), "zip.gguf"),
        1,
        &["zip.gguf", "not a GGUF file", "\"GGUF\""],
    );
    fails(
        plan(dir.path(), "missing.gguf"),
        1,
        &["missing.gguf", "cannot open"],
    );

    let gguf = synth(dir.path(), "v.gguf", &[]);
    patch(&gguf, 4, &1u32.to_le_bytes());
    fails(
        plan(dir.path(), "v.gguf"),
        1,
        &["version 1 is not supported"],
    );
    patch(&gguf, 4, &3u32.to_be_bytes());
    fails(plan(dir.path(), "v.gguf"), 1, &["big-endian"]);
    patch(&gguf, 4, &99u32.to_le_bytes());
    fails(
        plan(dir.path(), "v.gguf"),
        1,
        &["unsupported GGUF version 99"],
    );
}

#[test]
fn unsupported_tensor_type_is_named() {
    let dir = tempfile::tempdir().unwrap();
    // Q4_0: 18 bytes per 32 weights, not requantizable.
    write_gguf(
        &dir.path().join("q4_0.gguf"),
        &[],
        "output.weight",
        &[512, 16],
        2,
        16 * 16 * 18,
    );
    fails(
        plan(dir.path(), "q4_0.gguf"),
        1,
        &[
            "q4_0.gguf",
            "output.weight",
            "Q4_0",
            "ggml type 2",
            "supported: q4_k and q6_k as they are, and f32, f16, bf16, q8_0, q5_k with \
             --requantize",
        ],
    );
    // Q8_0: 34 bytes per 32 weights, requantizable: the refusal names the flag.
    write_gguf(
        &dir.path().join("q8.gguf"),
        &[],
        "output.weight",
        &[512, 16],
        8,
        16 * 16 * 34,
    );
    fails(
        run_in(
            dir.path(),
            &["slice", "--gguf", "q8.gguf", "--shards", "1", "--out", "s"],
        ),
        1,
        &["stored as q8_0", "--requantize q6_k", "--requantize q4_k"],
    );
}

#[test]
fn missing_tensor_and_bad_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    write_gguf(
        &p("none.gguf"),
        &[],
        "blk.0.attn_q.weight",
        &[256, 4],
        14,
        4 * 210,
    );
    fails(
        plan(dir.path(), "none.gguf"),
        1,
        &[
            "no lm-head tensor",
            "output.weight",
            "token_embd.weight",
            "blk.0.attn_q.weight",
        ],
    );
    write_gguf(
        &p("cols.gguf"),
        &[],
        "output.weight",
        &[300, 4],
        14,
        4 * 210,
    );
    fails(
        plan(dir.path(), "cols.gguf"),
        1,
        &["300 columns", "multiple of 256"],
    );
    write_gguf(
        &p("3d.gguf"),
        &[],
        "output.weight",
        &[256, 2, 2],
        14,
        4 * 210,
    );
    fails(plan(dir.path(), "3d.gguf"), 1, &["3 dimensions"]);
    write_gguf(
        &p("5d.gguf"),
        &[],
        "output.weight",
        &[256, 1, 1, 1, 4],
        14,
        4 * 210,
    );
    fails(
        plan(dir.path(), "5d.gguf"),
        1,
        &["5 dimensions, expected 1 to 4"],
    );
    write_gguf(&p("empty.gguf"), &[], "output.weight", &[256, 0], 14, 0);
    fails(plan(dir.path(), "empty.gguf"), 1, &["no rows"]);
}

#[test]
fn absurd_counts_fail_fast() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = synth(dir.path(), "n.gguf", &[]);
    let good = fs::read(&gguf).unwrap();
    for at in [8, 16] {
        fs::write(&gguf, &good).unwrap();
        patch(&gguf, at, &(u64::MAX / 3).to_le_bytes());
        fails(
            plan(dir.path(), "n.gguf"),
            1,
            &["the header claims", "truncated or corrupt"],
        );
    }

    // An array whose element count is absurd: its count is right after the key and two type ids.
    let key = "tokenizer.ggml.tokens";
    let tokens = MetaValue::Array(vec![MetaValue::Str("a".into()), MetaValue::Str("b".into())]);
    let path = dir.path().join("arr.gguf");
    write_gguf(
        &path,
        &[(key, tokens)],
        "output.weight",
        &[256, 4],
        14,
        4 * 210,
    );
    ok(plan(dir.path(), "arr.gguf"));
    let bytes = fs::read(&path).unwrap();
    let at = bytes
        .windows(key.len())
        .position(|w| w == key.as_bytes())
        .unwrap()
        + key.len()
        + 8;
    patch(&path, at, &(1u64 << 60).to_le_bytes());
    fails(
        plan(dir.path(), "arr.gguf"),
        1,
        &["tokenizer.ggml.tokens", "array claims"],
    );
}

#[test]
fn arrays_of_every_kind_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let meta = [
        (
            "a.strings",
            MetaValue::Array(vec![MetaValue::Str("x".into()); 3]),
        ),
        ("a.floats", MetaValue::Array(vec![MetaValue::F32(1.5); 5])),
        ("a.empty", MetaValue::Array(vec![])),
        // The one array that is read, here of the wrong type: skipped like the others.
        (
            "tokenizer.ggml.tokens",
            MetaValue::Array(vec![MetaValue::U32(1); 4]),
        ),
        (
            "a.nested",
            MetaValue::Array(vec![MetaValue::Array(vec![MetaValue::U32(7); 2]); 2]),
        ),
        ("general.name", MetaValue::Str("arrays".into())),
        ("llama.final_logit_softcapping", MetaValue::F32(30.0)),
    ];
    write_gguf(
        &dir.path().join("a.gguf"),
        &meta,
        "output.weight",
        &[256, 4],
        14,
        4 * 210,
    );
    let out = ok(plan(dir.path(), "a.gguf"));
    assert!(out.contains("model   arrays"), "{out}");
    assert!(out.contains("softcap 30"), "{out}");
}

#[test]
fn offsets_beyond_the_file_and_misaligned() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = synth(dir.path(), "o.gguf", &[]);
    let bytes = fs::read(&gguf).unwrap();
    let name = b"output.weight";
    // name, n_dims (4), two dims (16), type (4), then the offset.
    let at = bytes.windows(name.len()).position(|w| w == name).unwrap() + name.len() + 24;
    patch(&gguf, at, &(1u64 << 40).to_le_bytes());
    fails(
        plan(dir.path(), "o.gguf"),
        1,
        &["extends past the end of the file"],
    );
    patch(&gguf, at, &(u64::MAX - 31).to_le_bytes());
    fails(
        plan(dir.path(), "o.gguf"),
        1,
        &["extends past the end of the file"],
    );
    patch(&gguf, at, &8u64.to_le_bytes());
    fails(
        plan(dir.path(), "o.gguf"),
        1,
        &["not a multiple of the alignment 32"],
    );
}
