//! A command that writes files and fails leaves the folder as it was: `synth` and `logits --out`
//! write under a temporary name and rename at the end, `slice` commits its files last (its NaN
//! case is in `requantize.rs`).

use std::fs;
use std::path::Path;

use crate::common::*;

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn failed_writes_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The output's name is taken by a folder: the rename at the end fails, after every byte was
    // written; no temporary file is left.
    fs::create_dir(d.join("taken")).unwrap();
    let synth_into = |out: &str| {
        run_in(
            d,
            &[
                "synth", "--out", out, "--shape", "tiny", "--type", "q6_k", "--seed", "3",
            ],
        )
    };
    fails(synth_into("taken"), 1, &["cannot write", "taken"]);
    assert_eq!(names(d), ["taken"]);
    // Over an existing file: replaced whole.
    fs::write(d.join("m.gguf"), b"old").unwrap();
    ok(synth_into("m.gguf"));
    assert!(fs::metadata(d.join("m.gguf")).unwrap().len() > 1_000_000);
    assert_eq!(names(d), ["m.gguf", "taken"]);

    ok(run_in(
        d,
        &["slice", "--gguf", "m.gguf", "--shards", "2", "--out", "s"],
    ));
    let logits_to = |out: &str| {
        let args = [
            "logits",
            "--manifest",
            "s/manifest.json",
            "--local",
            "--hidden-seed",
            "1",
        ];
        run_in(d, &[&args[..], &["--out", out]].concat())
    };
    fails(logits_to("taken"), 1, &["cannot write", "taken"]);
    assert_eq!(names(d), ["m.gguf", "s", "taken"]);
    ok(logits_to("z.f32"));
    assert_eq!(fs::metadata(d.join("z.f32")).unwrap().len(), 4 * 4096);

    // A truncated GGUF: slice fails before it creates its folder.
    let bytes = fs::read(d.join("m.gguf")).unwrap();
    fs::write(d.join("cut.gguf"), &bytes[..bytes.len() / 2]).unwrap();
    let slice = run_in(
        d,
        &["slice", "--gguf", "cut.gguf", "--shards", "2", "--out", "t"],
    );
    fails(slice, 1, &["cut.gguf"]);
    assert_eq!(names(d), ["cut.gguf", "m.gguf", "s", "taken", "z.f32"]);
}
