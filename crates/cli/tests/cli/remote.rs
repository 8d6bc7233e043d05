//! `logits` against shard endpoints: a tiny HTTP server on 127.0.0.1 plays the shard Worker.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use cobordism_protocol::{decode_hidden, softcap, Form, Manifest, TopK};
use kquant::QMatrix;

use crate::common::*;

/// The token the fake shard accepts (requests without a token are served too).
const TOKEN: &str = "t0k";

/// How the fake shard answers.
#[derive(Clone, Copy)]
enum Mode {
    Correct,
    WrongRowStart,
    /// Claims to serve another manifest version.
    StaleVersion,
    /// 503 with `Retry-After: 0` for the first request, then correct answers.
    BusyOnce,
    /// 503 `auth_not_configured` without `Retry-After`, as a shard without a token answers.
    NoToken,
    /// Answers without `X-Shard-Count` (a shard older than the CLI).
    NoShardCount,
    /// Answers every section form with an empty section, as no correct shard does.
    EmptySections,
}

/// A one-shard manifest (tiny shape, soft cap 30) sliced in `dir/s`.
fn one_shard(dir: &Path) -> Manifest {
    let gguf = synth(dir, "tiny.gguf", &["--softcap", "30"]);
    ok(run_in(
        dir,
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
    Manifest::parse(&fs::read(dir.join("s/manifest.json")).unwrap()).unwrap()
}

/// Serves shard 0 of `manifest` on a free port until the test ends; returns its base URL.
/// A one-shard model in a temporary directory, served in `mode`: the directory and the URL.
fn one_shard_served(mode: Mode) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let m = one_shard(dir.path());
    let weights = fs::read(slice_path(&dir.path().join("s"), 0)).unwrap();
    let url = serve(m, weights, mode);
    (dir, url)
}

fn serve(manifest: Manifest, weights: Vec<u8>, mode: Mode) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let busy = matches!(mode, Mode::BusyOnce) && n == 0;
            answer(stream.unwrap(), &manifest, &weights, mode, busy);
        }
    });
    url
}

fn answer(mut stream: TcpStream, m: &Manifest, weights: &[u8], mode: Mode, busy: bool) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    reader.read_line(&mut request_line).unwrap();
    let (mut len, mut auth) = (0, None);
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap();
            }
            if k.eq_ignore_ascii_case("authorization") {
                auth = Some(v.trim().to_string());
            }
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    let target = request_line
        .trim()
        .strip_prefix("POST /cobordism-lm-head")
        .and_then(|t| t.strip_suffix(" HTTP/1.1"))
        .unwrap_or_else(|| panic!("{request_line}"));
    let query = target.strip_prefix('?').unwrap_or("");
    let form = Form::parse(query.split('&').filter_map(|p| p.split_once('='))).unwrap();
    if busy {
        let msg = r#"{"error":"busy","detail":"loading the slice"}"#;
        return error(stream, "503 Service Unavailable\r\nRetry-After: 0", msg);
    }
    if matches!(mode, Mode::NoToken) {
        let msg =
            r#"{"error":"auth_not_configured","detail":"this shard has no AUTH_TOKEN secret"}"#;
        return error(stream, "503 Service Unavailable", msg);
    }
    if auth.is_some_and(|a| a != format!("Bearer {TOKEN}")) {
        let msg = concat!(
            r#"{"error":"unauthorized","#,
            r#""detail":"a valid Authorization: Bearer token is required"}"#
        );
        return error(stream, "401 Unauthorized", msg);
    }
    let (x, _) = decode_hidden(&body, m.hidden).unwrap();
    let s = &m.shards[0];
    let mut logits = vec![0.0f32; s.row_count];
    QMatrix::with_layout(m.dtype, m.layout, weights, s.row_count, m.hidden)
        .unwrap()
        .mat_vec(&x, &mut logits)
        .unwrap();
    softcap(&mut logits, m.softcap);
    let out = match mode {
        Mode::EmptySections => empty_section(),
        _ => form
            .encode(&logits, s.row_count, s.row_start as u32)
            .unwrap(),
    };
    let row_start = match mode {
        Mode::WrongRowStart => s.row_start + 1,
        _ => s.row_start,
    };
    let version = match mode {
        Mode::StaleVersion => "0123456789abcdef",
        _ => &m.version,
    };
    let shard_count = match mode {
        Mode::NoShardCount => String::new(),
        _ => format!("X-Shard-Count: {}\r\n", m.shard_count),
    };
    write!(
        stream,
        "HTTP/1.1 200 OK\r\n\
         Content-Type: application/octet-stream\r\n\
         X-Shard-Index: 0\r\n\
         {shard_count}\
         X-Vocab: {}\r\n\
         X-Row-Start: {row_start}\r\n\
         X-Row-Count: {}\r\n\
         Server-Timing: load;dur=0, compute;dur=1.5\r\n\
         X-Cache: hit\r\n\
         X-Manifest-Version: {version}\r\n\
         Content-Length: {}\r\n\
         Connection: close\r\n\r\n",
        m.vocab,
        s.row_count,
        out.len()
    )
    .unwrap();
    stream.write_all(&out).unwrap();
}

/// A section without entries.
fn empty_section() -> Vec<u8> {
    let mut out = Vec::new();
    let empty = TopK {
        max_logit: 0.0,
        log_sum_exp: 0.0,
        entries: Vec::new(),
    };
    empty.encode_into(&mut out);
    out
}

fn error(mut stream: TcpStream, status: &str, json: &str) {
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{json}",
        json.len()
    )
    .unwrap();
}

fn logits(dir: &Path, url: &str, extra: &[&str]) -> std::process::Output {
    let args = [
        "logits",
        "--manifest",
        "s/manifest.json",
        "--endpoint",
        url,
        "--hidden-seed",
        "4",
    ];
    run_in(dir, &[&args[..], extra].concat())
}

#[test]
fn verify_passes_against_a_correct_shard() {
    let dir = tempfile::tempdir().unwrap();
    let m = one_shard(dir.path());
    let weights = fs::read(slice_path(&dir.path().join("s"), 0)).unwrap();
    let url = serve(m.clone(), weights, Mode::Correct);
    let out = ok(logits(
        dir.path(),
        &url,
        &["--verify", "--out", "remote.f32", "--token", "t0k"],
    ));
    assert!(out.contains("verify: 4096 logits identical"), "{out}");
    assert!(out.contains("hit"), "timing table: {out}");
    assert!(out.contains("softcap 30"), "{out}");

    ok(run_in(
        dir.path(),
        &[
            "logits",
            "--manifest",
            "s/manifest.json",
            "--local",
            "--hidden-seed",
            "4",
            "--out",
            "local.f32",
        ],
    ));
    assert_eq!(
        fs::read(dir.path().join("remote.f32")).unwrap(),
        fs::read(dir.path().join("local.f32")).unwrap()
    );

    fails(
        logits(dir.path(), &url, &["--token", "wrong"]),
        1,
        &[
            "shard 0",
            "HTTP 401",
            "unauthorized",
            "--token or COBORDISM_TOKEN",
        ],
    );
}

#[test]
fn a_shard_without_a_token_fails_at_once_with_its_reason() {
    let (dir, url) = one_shard_served(Mode::NoToken);
    let start = Instant::now();
    let out = fails(
        logits(dir.path(), &url, &[]),
        1,
        &[
            "shard 0",
            "HTTP 503 auth_not_configured",
            "no AUTH_TOKEN secret",
        ],
    );
    assert!(!out.contains("attempts"), "one attempt: {out}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn an_answer_that_does_not_say_its_shard_count_is_refused() {
    let (dir, url) = one_shard_served(Mode::NoShardCount);
    fails(
        logits(dir.path(), &url, &[]),
        1,
        &["shard 0", "X-Shard-Count is missing"],
    );
}

#[test]
fn too_few_endpoints_name_the_rows_they_would_miss() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = synth(dir.path(), "tiny.gguf", &[]);
    for shards in ["8", "12"] {
        let out = format!("s{shards}");
        let args = [
            "slice",
            "--gguf",
            gguf.to_str().unwrap(),
            "--shards",
            shards,
            "--out",
            &out,
        ];
        ok(run_in(dir.path(), &args));
    }
    let m8 = Manifest::parse(&fs::read(dir.path().join("s8/manifest.json")).unwrap()).unwrap();
    let m12 = Manifest::parse(&fs::read(dir.path().join("s12/manifest.json")).unwrap()).unwrap();
    // Nothing listens: the check comes before any request.
    let endpoint = ["--endpoint", "http://127.0.0.1:9"];
    let ask = |manifest: &str, n: usize| {
        let mut args = vec!["logits", "--manifest", manifest, "--hidden-seed", "1"];
        for _ in 0..n {
            args.extend(endpoint);
        }
        run_in(dir.path(), &args)
    };
    let (v, last8, first_unserved12) = (m8.vocab, m8.shards[7].row_start, m12.shards[8].row_start);
    fails(
        ask("s8/manifest.json", 7),
        1,
        &[
            "7 endpoints given for the manifest's 8 shards",
            &format!("shard 7 would have no endpoint, and rows {last8}..{v} of {v} no answer"),
        ],
    );
    fails(
        ask("s12/manifest.json", 8),
        1,
        &[
            "8 endpoints given for the manifest's 12 shards",
            &format!("shards 8…11 would have no endpoint, and rows {first_unserved12}..{v}"),
        ],
    );
}

#[test]
fn a_busy_shard_is_retried_after_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let m = one_shard(dir.path());
    let weights = fs::read(slice_path(&dir.path().join("s"), 0)).unwrap();
    let url = serve(m.clone(), weights.clone(), Mode::BusyOnce);
    let out = ok(logits(dir.path(), &url, &["--verify"]));
    assert!(out.contains("verify: 4096 logits identical"), "{out}");

    let url = serve(m, weights, Mode::BusyOnce);
    fails(
        logits(dir.path(), &url, &["--retries", "0"]),
        1,
        &[
            "shard 0",
            &url,
            "HTTP 503",
            "loading the slice",
            "(after 1 attempt)",
        ],
    );
}

#[test]
fn empty_sections_are_an_error_not_a_panic() {
    let (dir, url) = one_shard_served(Mode::EmptySections);
    let sample = |temperature: &str| {
        let args = [
            "sample",
            "--manifest",
            "s/manifest.json",
            "--endpoint",
            &url,
        ];
        let rest = [
            "--hidden-seed",
            "4",
            "--temperature",
            temperature,
            "--seed",
            "1",
        ];
        run_in(dir.path(), &[&args[..], &rest].concat())
    };
    fails(sample("1"), 1, &["every shard's answer is empty"]);
    fails(sample("0"), 1, &["every shard's top-1 is empty"]);
}

#[test]
fn a_wrong_row_start_is_refused() {
    let (dir, url) = one_shard_served(Mode::WrongRowStart);
    fails(
        logits(dir.path(), &url, &[]),
        1,
        &["shard 0", &url, "X-Row-Start is \"1\", the manifest says 0"],
    );
}

#[test]
fn a_stale_version_is_refused() {
    let (dir, url) = one_shard_served(Mode::StaleVersion);
    fails(
        logits(dir.path(), &url, &[]),
        1,
        &["shard 0", "serves manifest version \"0123456789abcdef\""],
    );
}

#[test]
fn a_down_endpoint_is_named_within_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    one_shard(dir.path());
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let start = Instant::now();
    fails(
        logits(dir.path(), &url, &["--timeout-secs", "2", "--retries", "1"]),
        1,
        &["1 of 1 shards failed", "shard 0", &url, "after 2 attempts"],
    );
    assert!(start.elapsed() < Duration::from_secs(10));

    fails(
        logits(dir.path(), &url, &["--endpoint", &url]),
        1,
        &["2 endpoints given for the manifest's 1 shards"],
    );
}

#[test]
fn the_local_path_refuses_what_the_shard_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let m = one_shard(dir.path());
    // Finite values whose products overflow f32: the shard answers 400 non_finite.
    let huge: Vec<u8> = (0..m.hidden).flat_map(|_| f32::MAX.to_le_bytes()).collect();
    fs::write(dir.path().join("huge.f32"), huge).unwrap();
    let local = [
        "--manifest",
        "s/manifest.json",
        "--local",
        "--hidden",
        "huge.f32",
    ];
    fails(
        run_in(dir.path(), &[&["logits"][..], &local].concat()),
        1,
        &["non_finite", "overflow f32"],
    );
    fails(
        run_in(
            dir.path(),
            &[&["sample", "--temperature", "0.001"][..], &local].concat(),
        ),
        2,
        &[
            "--temperature",
            "must be 0 (greedy) or a number from 0.01 to 1000",
        ],
    );
    // Out-of-range values are bad arguments (exit 2), as every other usage error.
    for (args, why) in [
        (
            &["sample", "--temperature", "5000"][..],
            "from 0.01 to 1000, not 5000",
        ),
        (
            &["sample", "--top-p", "1.5"][..],
            "top-p must be in (0, 1], not 1.5",
        ),
        (
            &["sample", "--min-p", "0"][..],
            "min-p must be in (0, 1], not 0",
        ),
    ] {
        fails(run_in(dir.path(), &[args, &local].concat()), 2, &[why]);
    }
    fails(
        run_in(
            dir.path(),
            &[
                "synth", "--out", "x.gguf", "--hidden", "500", "--vocab", "10",
            ],
        ),
        2,
        &["--hidden", "must be a positive multiple of 256"],
    );
}
