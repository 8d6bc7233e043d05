//! `slice --requantize` for lm-heads stored as F32, F16, BF16, Q8_0 and Q5_K, on GGUF files the
//! PyPI `gguf` package writes (`make_source_gguf.py`): our dequantizers give the bits of the
//! package's, and `logits --local` of the requantized slices stays within the error `slice`
//! reports of the float64 product of the stored matrix. Unsupported types are refused by name.

use std::fs;
use std::path::Path;
use std::process::Command;

use cobordism::gguf::Gguf;
use cobordism::lm_head::LmHead;
use kquant::QuantType;

use crate::common::*;

const SCRIPT: &str = include_str!("make_source_gguf.py");
const ROWS: usize = 512;
const COLS: usize = 512;

/// Writes `m.gguf` with a 512 × 512 lm-head stored as `ty` and, but for unsupported types, the
/// `gguf` package's dequantization of it to `deq.f32`.
fn make(dir: &Path, ty: &str) {
    let out = Command::new("python3")
        .args(["-c", SCRIPT])
        .args([dir.join("m.gguf"), dir.join("deq.f32")].map(|p| p.display().to_string()))
        .arg(ty)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn floats(path: &Path) -> Vec<f32> {
    fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[test]
fn every_source_type_dequantizes_as_the_gguf_package_and_requantizes_within_its_reported_error() {
    for ty in ["f32", "f16", "bf16", "q8_0", "q5_k"] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        make(d, ty);

        // Our dequantizer against the package's, bit for bit.
        let gguf = Gguf::open(&d.join("m.gguf")).unwrap();
        let head = LmHead::find(&gguf, Some(QuantType::Q6K)).unwrap();
        assert_eq!(head.source.name(), ty);
        let stored = fs::read(d.join("m.gguf")).unwrap();
        let start = head.data_offset as usize;
        let mut ours = vec![0.0f32; ROWS * COLS];
        head.source
            .dequantize(
                &stored[start..start + ROWS * head.source_row_bytes],
                &mut ours,
            )
            .unwrap();
        let theirs = floats(&d.join("deq.f32"));
        let differ = ours
            .iter()
            .zip(&theirs)
            .position(|(a, b)| a.to_bits() != b.to_bits());
        assert_eq!(
            differ, None,
            "{ty}: dequantized weights differ from the gguf package's"
        );

        // Without the flag: refused, naming it.
        fails(
            cli(d, "slice --gguf m.gguf --shards 2 --out s"),
            1,
            &["--requantize q6_k"],
        );
        for target in ["q6_k", "q4_k"] {
            let out = ok(cli(
                d,
                &format!("slice --gguf m.gguf --shards 2 --out {target} --requantize {target}"),
            ));
            let max_err: f64 = out
                .split("overall:   max |Δw| ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{ty} → {target}: no overall error in\n{out}"));
            let manifest = fs::read_to_string(d.join(target).join("manifest.json")).unwrap();
            assert!(
                manifest.contains(&format!("\"source_dtype\": \"{ty}\"")),
                "{manifest}"
            );

            let x = seeded_hidden(3, COLS);
            let h: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            fs::write(d.join("h.f32"), h).unwrap();
            ok(cli(
                d,
                &format!(
                    "logits --manifest {target}/manifest.json --local --hidden h.f32 --out y.f32"
                ),
            ));
            let y = floats(&d.join("y.f32"));
            // |y − W·x| ≤ max|Δw| · ‖x‖₁, plus the f32 rounding of the kernel.
            let l1: f64 = x.iter().map(|v| f64::from(v.abs())).sum();
            for (r, &got) in y.iter().enumerate() {
                let row = &theirs[r * COLS..(r + 1) * COLS];
                let exact: f64 = row
                    .iter()
                    .zip(&x)
                    .map(|(&w, &v)| f64::from(w) * f64::from(v))
                    .sum();
                let scale: f64 = row
                    .iter()
                    .zip(&x)
                    .map(|(&w, &v)| f64::from((w * v).abs()))
                    .sum();
                let bound = max_err * l1 + 1e-5 * scale;
                assert!(
                    (f64::from(got) - exact).abs() <= bound,
                    "{ty} → {target}, row {r}: {got} vs {exact} (bound {bound})"
                );
            }
        }
    }
}

#[test]
fn an_unsupported_type_is_refused_naming_the_supported_ones() {
    let dir = tempfile::tempdir().unwrap();
    make(dir.path(), "iq2_xxs");
    fails(
        cli(
            dir.path(),
            "slice --gguf m.gguf --shards 2 --out s --requantize q6_k",
        ),
        1,
        &["IQ2_XXS", "f32, f16, bf16, q8_0, q5_k"],
    );
}

/// Every file below `dir` with its bytes, sorted (empty if `dir` does not exist).
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = fs::read_dir(dir)
        .map(|d| {
            d.map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().into_string().unwrap(),
                    fs::read(e.path()).unwrap(),
                )
            })
            .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

#[test]
fn a_failed_slice_leaves_the_folder_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    make(d, "f32");
    // A NaN weight in the last shard's rows: the first shard's slice is complete by then.
    let bad = d.join("nan.gguf");
    let mut bytes = fs::read(d.join("m.gguf")).unwrap();
    let head = LmHead::find(
        &Gguf::open(&d.join("m.gguf")).unwrap(),
        Some(QuantType::Q6K),
    )
    .unwrap();
    let at = head.data_offset as usize + (ROWS - 1) * head.source_row_bytes;
    bytes[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    fs::write(&bad, bytes).unwrap();
    let slice = |gguf: &str, extra: &[&str]| {
        let args = [
            "slice",
            "--gguf",
            gguf,
            "--shards",
            "2",
            "--requantize",
            "q6_k",
            "--out",
            "s",
        ];
        run_in(d, &[&args[..], extra].concat())
    };
    // Into a new folder: it is gone again, and the same command fails the same way, not on
    // leftovers.
    for _ in 0..2 {
        fails(slice("nan.gguf", &[]), 1, &["row 511", "NaN"]);
        assert!(!d.join("s").exists(), "the folder it created is removed");
    }
    // Over an earlier run's slices with --force: they stay as they were.
    ok(slice("m.gguf", &[]));
    let before = contents(&d.join("s"));
    assert!(before.iter().any(|(name, _)| name == "manifest.json"));
    fails(slice("nan.gguf", &["--force"]), 1, &["row 511", "NaN"]);
    assert_eq!(contents(&d.join("s")), before);
    // And a successful --force replaces them.
    ok(slice("m.gguf", &["--force"]));
    assert_eq!(
        contents(&d.join("s")),
        before,
        "the same model gives the same files"
    );
}
