//! synth → plan → slice → logits --local → upload, on the tiny shape.

use std::fs;
use std::path::Path;

use cobordism_protocol::{encode_f32, Checksum, Manifest, TopK};
use kquant::{repack, Layout, QMatrix, QuantType};

use crate::common::*;

#[test]
fn plan_says_whether_slices_fit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    synth(d, "tiny.gguf", &[]);

    let out = ok(cli(d, "plan --gguf tiny.gguf --shards 3"));
    assert!(out.contains("0..1366"), "{out}");
    assert!(out.contains("2731..4096"), "{out}");
    assert!(out.contains("all 3 shard slices fit"), "{out}");

    // 4096 rows × 420 bytes = 1.64 MiB, ~2 MiB with the shard's buffers (scratch, one request
    // computing, four bodies in flight): one or two shards are over 1 MiB, three are not.
    fails(
        cli(d, "plan --gguf tiny.gguf --shards 1 --budget-mib 1"),
        3,
        &[
            "do not fit in 1 MiB",
            "smallest shard count that fits is 3",
            "--shards 3",
        ],
    );
    fails(
        cli(
            d,
            "slice --gguf tiny.gguf --shards 1 --budget-mib 1 --out s",
        ),
        3,
        &["smallest shard count that fits is 3"],
    );
    assert!(!d.join("s/manifest.json").exists());
    // Out of range at all: a usage error (exit 2), as for any bad argument.
    fails(
        cli(d, "plan --gguf tiny.gguf --shards 0"),
        2,
        &["'0' for '--shards <N>'", "from 1 to 4096"],
    );
    fails(
        cli(d, "plan --gguf tiny.gguf --shards 4097"),
        2,
        &["'4097' for '--shards <N>'"],
    );
}

#[test]
fn slices_are_the_tensor_cut_by_rows() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gguf = synth(d, "tiny.gguf", &["--softcap", "30", "--tied"]);
    let (head, tensor) = tensor_bytes(&gguf);
    assert_eq!(head.tensor, "token_embd.weight");
    let slice = "slice --gguf tiny.gguf --shards 3 --out s";
    ok(cli(d, slice));

    let m = Manifest::parse(&fs::read(d.join("s/manifest.json")).unwrap()).unwrap();
    assert_eq!((m.hidden, m.vocab, m.shard_count), (512, 4096, 3));
    assert_eq!(
        (m.dtype.name(), m.tensor.as_str()),
        ("q6_k", "token_embd.weight")
    );
    assert_eq!(m.model, "synth-tiny-q6_k");
    assert_eq!(m.softcap, Some(30.0));
    assert_eq!(m.version, m.content_version());
    let mut joined = Vec::new();
    for s in &m.shards {
        let bytes = fs::read(d.join("s").join(&s.key)).unwrap();
        assert_eq!(bytes.len() as u64, s.bytes);
        assert_eq!(Checksum::of(&bytes), s.checksum);
        joined.extend(bytes);
    }
    assert!(joined == tensor, "the slices differ from the tensor");

    // A second run refuses to overwrite, unless --force.
    fails(cli(d, slice), 1, &["already exists", "--force"]);
    ok(cli(d, &format!("{slice} --force")));
}

#[test]
fn local_logits_are_deterministic_and_equal_a_direct_mat_vec() {
    for ty in ["q4_k", "q6_k"] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let gguf = synth(d, "tiny.gguf", &["--type", ty]);
        let (head, tensor) = tensor_bytes(&gguf);
        ok(cli(d, "slice --gguf tiny.gguf --shards 3 --out s"));
        let logits = |out: &str| {
            let line = format!(
                "logits --manifest s/manifest.json --local --hidden-seed 9 --top-k 4 --out {out}"
            );
            (ok(cli(d, &line)), fs::read(d.join(out)).unwrap())
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
        assert!(
            a == encode_f32(&want),
            "{ty}: local logits differ from mat_vec"
        );

        let top = TopK::compute(&want, 0, 4);
        let rows: Vec<&str> = table
            .lines()
            .filter(|l| l.trim_start().starts_with(char::is_numeric))
            .collect();
        assert_eq!(rows.len(), 4, "{table}");
        for (row, (token, _)) in rows.iter().zip(&top.entries) {
            assert_eq!(
                row.split_whitespace().nth(1),
                Some(token.to_string().as_str())
            );
        }

        // A corrupted slice is caught by its checksum.
        let slice = slice_path(&d.join("s"), 1);
        let mut bytes = fs::read(&slice).unwrap();
        bytes[7] ^= 1;
        fs::write(&slice, bytes).unwrap();
        fails(
            cli(
                d,
                "logits --manifest s/manifest.json --local --hidden-seed 9",
            ),
            1,
            &["shard 1", "checksum"],
        );
    }
}

#[test]
fn packed6_slices_give_the_same_logits_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gguf = synth(d, "tiny.gguf", &["--softcap", "30"]);
    let (_, tensor) = tensor_bytes(&gguf);
    ok(cli(d, "slice --gguf tiny.gguf --shards 2 --out g"));
    ok(cli(
        d,
        "slice --gguf tiny.gguf --shards 2 --out p --layout packed6",
    ));

    let m = Manifest::parse(&fs::read(d.join("p/manifest.json")).unwrap()).unwrap();
    assert_eq!(m.layout, Layout::Packed6);
    let ggml = Manifest::parse(&fs::read(d.join("g/manifest.json")).unwrap()).unwrap();
    assert_ne!(m.version, ggml.version, "the layout is part of the version");
    // The slices are the tensor's blocks repacked, checksummed as stored.
    let mut joined = Vec::new();
    for s in &m.shards {
        let bytes = fs::read(d.join("p").join(&s.key)).unwrap();
        assert_eq!(Checksum::of(&bytes), s.checksum);
        joined.extend(bytes);
    }
    repack(QuantType::Q6K, Layout::Packed6, Layout::Ggml, &mut joined).unwrap();
    assert!(
        joined == tensor,
        "packed6 slices are not the tensor repacked"
    );

    for precision in ["", "--int8"] {
        let logits = |dir: &str| {
            let line = format!(
                "logits --manifest {dir}/manifest.json --local --hidden-seed 4 {precision} \
                 --out {dir}.f32"
            );
            ok(cli(d, &line));
            fs::read(d.join(format!("{dir}.f32"))).unwrap()
        };
        assert!(
            logits("g") == logits("p"),
            "packed6 logits differ {precision}"
        );
    }

    synth(d, "q4.gguf", &["--type", "q4_k"]);
    fails(
        cli(
            d,
            "slice --gguf q4.gguf --shards 1 --out q --layout packed6",
        ),
        1,
        &["q4_k blocks cannot be stored in the packed6 layout"],
    );
    assert!(!d.join("q").exists(), "nothing written");
    fails(
        cli(
            d,
            "slice --gguf tiny.gguf --shards 1 --out q --layout packed4",
        ),
        2,
        &["\"packed4\" is not a layout (ggml, packed6, interleaved)"],
    );
}

#[test]
fn hidden_files_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    synth(d, "tiny.gguf", &[]);
    ok(cli(d, "slice --gguf tiny.gguf --shards 1 --out s"));
    fs::write(d.join("h.f32"), encode_f32(&seeded_hidden(3, 512))).unwrap();
    let from_file = ok(cli(
        d,
        "logits --manifest s/manifest.json --local --hidden h.f32",
    ));
    let from_seed = ok(cli(
        d,
        "logits --manifest s/manifest.json --local --hidden-seed 3",
    ));
    assert_eq!(from_file, from_seed);

    fs::write(d.join("short.f32"), [0u8; 100]).unwrap();
    fails(
        cli(
            d,
            "logits --manifest s/manifest.json --local --hidden short.f32",
        ),
        1,
        &["short.f32", "100 bytes", "expected 2048"],
    );
    let mut nan = encode_f32(&seeded_hidden(3, 512));
    nan[40..44].copy_from_slice(&f32::NAN.to_le_bytes());
    fs::write(d.join("nan.f32"), nan).unwrap();
    fails(
        cli(
            d,
            "logits --manifest s/manifest.json --local --hidden nan.f32",
        ),
        1,
        &["nan.f32", "value 10", "NaN"],
    );
}

#[cfg(unix)]
#[test]
fn upload_checks_slices_then_puts_the_manifest_last() {
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    synth(d, "tiny.gguf", &[]);
    ok(cli(d, "slice --gguf tiny.gguf --shards 2 --out s"));
    let log = d.join("calls.log");
    let fake = d.join("fake-wrangler");
    fs::write(
        &fake,
        // Records each call; `get` finds nothing, as in an empty bucket.
        format!(
            "#!/bin/sh\necho \"$@\" >> {}\ncase \"$3\" in \
             get) echo 'The specified key does not exist.' >&2; exit 1;; esac\n",
            log.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
    let fake = fake.to_str().unwrap();

    let upload = |extra: &str, wrangler: &str| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cobordism"));
        cmd.args(["upload", "--dir", "s", "--bucket", "lm"])
            .args(extra.split_whitespace())
            .current_dir(d)
            .env("COBORDISM_WRANGLER", wrangler);
        cmd.output().unwrap()
    };
    ok(upload("--remote", fake));
    let calls = fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = calls.lines().collect();
    assert_eq!(lines[0], "--version");
    assert!(lines[1].starts_with("r2 object get lm/synth-tiny-q6_k/manifest.json --pipe"));
    assert!(lines[2].starts_with("r2 object get lm/synth-tiny-q6_k/ledger.json --pipe"));
    let ledger = "r2 object put lm/synth-tiny-q6_k/ledger.json";
    assert!(
        lines.last().unwrap().starts_with(ledger),
        "the ledger last: {calls}"
    );
    let puts: Vec<&&str> = lines[3..]
        .iter()
        .filter(|l| !l.starts_with(ledger))
        .collect();
    assert_eq!(puts.len(), 3, "{calls}");
    let m = Manifest::parse(&fs::read(d.join("s/manifest.json")).unwrap()).unwrap();
    let put = |key: &str| format!("r2 object put lm/synth-tiny-q6_k/{key} --file ");
    assert!(m.shards[0].key.starts_with("shard-00.") && m.shards[0].key.ends_with(".bin"));
    // The slices in one wave (in either order), then the manifest.
    for shard in &m.shards {
        assert!(
            puts[..2].iter().any(|l| l.starts_with(&put(&shard.key))),
            "{calls}"
        );
    }
    assert!(puts[2].starts_with(&put("manifest.json")), "{calls}");
    assert!(puts.iter().all(|l| l.ends_with("--remote")), "{calls}");

    fs::remove_file(&log).unwrap();
    ok(upload("--remote --prefix models/tiny", fake));
    let calls = fs::read_to_string(&log).unwrap();
    assert!(
        calls.contains("put lm/models/tiny/manifest.json"),
        "{calls}"
    );
    assert!(
        calls
            .lines()
            .all(|l| l == "--version" || l.ends_with("--remote")),
        "{calls}"
    );

    fails(upload("--remote", "/nonexistent/wrangler"), 1, &["npm ci"]);
    // --local needs Miniflare from the current directory's node_modules: none here.
    fails(upload("--local", fake), 1, &["npm ci", "miniflare"]);
    assert_eq!(upload("--local --remote", fake).status.code(), Some(2));
    fails(upload("--remote --prefix a/../b", fake), 1, &["--prefix"]);

    // A slice that does not match the manifest stops the upload before anything is put.
    fs::remove_file(&log).unwrap();
    fs::write(slice_path(&d.join("s"), 1), b"short").unwrap();
    fails(upload("--remote", fake), 1, &["shard 1", "5 bytes"]);
    assert!(!log.exists());
}

/// `upload --local` through Miniflare, run from the repo root (whose node_modules has it, as a
/// user runs it): the slices go in, and a second upload finds them through the ledger it reads
/// back; `--prune --grace 0s` after a new version deletes the old version's slices.
#[test]
fn a_local_upload_writes_the_state_and_reads_its_ledger_back() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    synth(d, "tiny.gguf", &[]);
    ok(cli(d, "slice --gguf tiny.gguf --shards 2 --out s"));
    let (slices, state) = (d.join("s"), d.join("state"));
    let upload = |extra: &[&str]| {
        let mut args = vec![
            "upload",
            "--dir",
            slices.to_str().unwrap(),
            "--bucket",
            "lm",
        ];
        args.extend(["--local", "--persist-to", state.to_str().unwrap()]);
        args.extend(extra);
        ok(run_in(&root, &args))
    };
    let first = upload(&[]);
    assert!(first.contains("put 2 slices, 0 already there"), "{first}");
    let again = upload(&[]);
    assert!(again.contains("put 0 slices, 2 already there"), "{again}");
    assert!(state.join("v3/r2").is_dir());

    ok(cli(d, "slice --gguf tiny.gguf --shards 3 --out s --force"));
    let third = upload(&["--prune", "--grace", "0s"]);
    assert!(third.contains("put 3 slices, 0 already there"), "{third}");
    assert!(third.contains("pruned 2 objects"), "{third}");
}

#[test]
fn token_text_is_sliced_and_printed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    synth(d, "tiny.gguf", &[]);
    let out = ok(cli(d, "slice --gguf tiny.gguf --shards 2 --out s"));
    assert!(
        out.contains("wrote the text of 4096 tokens to tokens.bin"),
        "{out}"
    );
    let table = ok(cli(
        d,
        "logits --manifest s/manifest.json --local --hidden-seed 1",
    ));
    assert!(table.contains("probability   text"), "{table}");
    assert!(
        table
            .lines()
            .filter(|l| l.trim_end().ends_with('"'))
            .count()
            == 10,
        "{table}"
    );
    let drawn = ok(cli(
        d,
        "sample --manifest s/manifest.json --local --hidden-seed 1 --seed 2",
    ));
    assert!(drawn.contains("  text \""), "{drawn}");
    let lp = ok(cli(
        d,
        "logprobs --manifest s/manifest.json --local --hidden-seed 1 --tokens 0,1,2",
    ));
    assert!(lp.contains("\"<unk>\"") && lp.contains("\"</s>\""), "{lp}");

    // A damaged file is refused by name; without one, ids alone.
    let tokens = d.join("s/tokens.bin");
    let mut bytes = fs::read(&tokens).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    fs::write(&tokens, &bytes).unwrap();
    fails(
        cli(
            d,
            "logits --manifest s/manifest.json --local --hidden-seed 1",
        ),
        1,
        &["tokens.bin", "checksum"],
    );
    fs::remove_file(&tokens).unwrap();
    let plain = ok(cli(
        d,
        "logits --manifest s/manifest.json --local --hidden-seed 1",
    ));
    assert!(!plain.contains("text") && !plain.contains('"'), "{plain}");
    // A stale tokens.bin is an earlier run's file: in the way without --force, replaced with it.
    fs::create_dir(d.join("s2")).unwrap();
    fs::write(d.join("s2/tokens.bin"), b"old").unwrap();
    fails(
        cli(d, "slice --gguf tiny.gguf --shards 2 --out s2"),
        1,
        &["tokens.bin", "--force"],
    );
    ok(cli(d, "slice --gguf tiny.gguf --shards 2 --out s2 --force"));
    let again = ok(cli(
        d,
        "logits --manifest s2/manifest.json --local --hidden-seed 1",
    ));
    assert!(again.contains("probability   text"), "{again}");
}

/// A file as llama.cpp's tooling writes them, made by the PyPI `gguf` writer: 300 other tensors,
/// 160,000 token strings and as many merges (an array that is skipped), alignment 64.
#[test]
fn a_gguf_from_the_gguf_package_with_a_large_vocabulary() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = r#"
import sys, numpy as np, gguf
w = gguf.GGUFWriter(sys.argv[1], "llama")
w.add_custom_alignment(64)
w.add_embedding_length(256)
w.add_tokenizer_model("gpt2")
w.add_token_list([("tok%d" % i) if i % 3 else (chr(0x120) + "w%d\n" % i) for i in range(160000)])
w.add_token_merges(["a b"] * 160000)
for i in range(300):
    w.add_tensor("blk.%d.attn_norm.weight" % i, np.ones(256, dtype=np.float32))
blocks = np.zeros((4096, 210), dtype=np.uint8)
blocks[:, :128] = np.arange(128, dtype=np.uint8)
blocks[:, 192:208] = 1
blocks[:, 208:210] = np.frombuffer(np.float16(0.01).tobytes(), dtype=np.uint8)
w.add_tensor("output.weight", blocks, raw_dtype=gguf.GGMLQuantizationType.Q6_K)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
"#;
    let made = std::process::Command::new("python3")
        .args(["-c", script, d.join("big.gguf").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let out = ok(cli(d, "slice --gguf big.gguf --shards 2 --out s"));
    assert!(out.contains("wrote the text of 160000 tokens"), "{out}");
    let table = ok(cli(
        d,
        "logits --manifest s/manifest.json --local --hidden-seed 1 --top-k 3",
    ));
    assert!(
        table.contains("\"tok") || table.contains("\"\u{120}w"),
        "{table}"
    );
}

#[test]
fn extreme_synth_puts_every_quant_and_scale_at_its_extreme() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Q6_K block: ql[128] qh[64] scales[16] d(f16); Q4_K block: d dmin scales[12] qs[128].
    for (ty, block, quants, scales) in [
        ("q6_k", 210, 0..192, 192..208),
        ("q4_k", 144, 16..144, 4..16),
    ] {
        let gguf = synth(d, &format!("{ty}.gguf"), &["--type", ty, "--extreme"]);
        let (_, tensor) = tensor_bytes(&gguf);
        let row = tensor.len() / 4096;
        for (r, bytes) in tensor.chunks_exact(row).enumerate() {
            let fill = if r % 2 == 1 { 0x00 } else { 0xFF };
            for b in bytes.chunks_exact(block) {
                assert!(b[quants.clone()].iter().all(|&q| q == fill), "{ty} row {r}");
                let extreme = |s: &u8| match ty {
                    "q6_k" => *s == 0x80 || *s == 0x7F,
                    _ => *s == 0xFF,
                };
                assert!(b[scales.clone()].iter().all(extreme), "{ty} row {r}");
            }
        }
    }
}
