//! `Isolate::lm_head`: one request from its headers to its answer — the order that keeps a wrong
//! or oversized request from costing a body buffer or a load, and the answer's headers.

mod common;

use std::cell::Cell;
use std::future::Ready;

use cobordism_protocol::adjust::{append_section, Adjust, MAX_ADJUST_BYTES};
use cobordism_protocol::wire::header;
use cobordism_protocol::{Form, Precision, Query};
use cobordism_shard::{
    BodyPool, Coalescer, Framing, Isolate, Served, Shard, ShardError, MAX_BODY_BYTES,
};
use common::*;
use futures_util::stream::{self, StreamExt};

const LOGITS: Query = Query {
    form: Form::Logits,
    precision: Precision::Exact,
    adjust: None,
};

/// What the pipeline was asked to do: waits for the slice, body chunks read.
#[derive(Default)]
struct Calls {
    resident: Cell<u32>,
    chunks: Cell<u32>,
}

/// One request for all logits over `shard` and `store` with these framing headers and body
/// chunks.
fn serve(
    shard: &Shard,
    store: &Store,
    framing: Framing,
    body: Option<Vec<Vec<u8>>>,
    calls: &Calls,
) -> Result<Served, ShardError> {
    serve_query(&LOGITS, shard, store, (framing, body), calls)
}

/// [`serve`] of `query`.
fn serve_query(
    query: &Query,
    shard: &Shard,
    store: &Store,
    (framing, body): (Framing, Option<Vec<Vec<u8>>>),
    calls: &Calls,
) -> Result<Served, ShardError> {
    let (passes, bodies, cfg) = (Coalescer::new(), BodyPool::default(), settings(2));
    let isolate = Isolate {
        shard,
        passes: &passes,
        bodies: &bodies,
    };
    let resident = || {
        calls.resident.set(calls.resident.get() + 1);
        shard.ensure(&cfg, store)
    };
    let body = body.map(|chunks| {
        stream::iter(chunks).map(|c| {
            calls.chunks.set(calls.chunks.get() + 1);
            Ok(c)
        })
    });
    let no_turns: Option<fn() -> Ready<()>> = None;
    block_on(isolate.lm_head(&cfg, query, framing, resident, body, no_turns, || 0.0))
}

fn uploaded(seed: u64) -> (Store, Shard, Model) {
    let (store, m) = (Store::default(), model(seed, 2));
    store.upload(&m);
    (store, Shard::new(), m)
}

fn error(r: Result<Served, ShardError>) -> &'static str {
    r.err().expect("an error").code.name()
}

#[test]
fn a_request_is_served_with_its_headers() {
    let (store, shard, m) = uploaded(41);
    let calls = Calls::default();
    let vector = vec![0u8; 4 * HIDDEN];
    let length = vector.len().to_string();
    let framing = Framing {
        content_length: Some(&length),
        transfer_encoding: None,
    };
    let (first, second) = (vector[..100].to_vec(), vector[100..].to_vec());
    let served = serve(&shard, &store, framing, Some(vec![first, second]), &calls).unwrap();
    assert_eq!((calls.resident.get(), calls.chunks.get()), (1, 2));
    assert_eq!(
        served.answer.payload.len(),
        4 * m.manifest.shards[0].row_count
    );
    let headers = served.headers(&settings(2), &LOGITS).pairs();
    let value = |name: &str| headers.iter().find(|(n, _)| *n == name).unwrap().1.clone();
    assert_eq!(value(header::CACHE), "miss");
    assert_eq!(value(header::BATCH), "1");
    assert_eq!(value(header::REPLY), "logits");
    assert_eq!(value(header::MANIFEST_VERSION), m.manifest.version);
}

#[test]
fn a_length_over_the_slices_cap_is_413_before_a_byte_of_the_body_is_read() {
    let (store, shard, _) = uploaded(42);
    let calls = Calls::default();
    // Under the cap of every manifest, over this slice's (8 vectors of HIDDEN floats).
    let length = (8 * 4 * HIDDEN + 4).to_string();
    let framing = Framing {
        content_length: Some(&length),
        transfer_encoding: None,
    };
    let body = Some(vec![vec![0u8; 8 * 4 * HIDDEN + 4]]);
    assert_eq!(
        error(serve(&shard, &store, framing, body, &calls)),
        "payload_too_large"
    );
    assert_eq!(calls.chunks.get(), 0, "the body was read");
}

#[test]
fn a_body_may_carry_the_adjustments_its_query_declares_within_the_memory_for_bodies() {
    let (store, shard, m) = uploaded(45);
    let mut body = vec![0u8; 8 * 4 * HIDDEN];
    let allowed = Adjust {
        allowed: Some(vec![(1, 2)]),
        ..Adjust::none()
    };
    let len = append_section(&mut body, &vec![allowed; 8]);
    let query = Query {
        adjust: len,
        ..LOGITS
    };
    let length = body.len().to_string();
    let framing = Framing {
        content_length: Some(&length),
        transfer_encoding: None,
    };
    let calls = Calls::default();
    let served = serve_query(&query, &shard, &store, (framing, Some(vec![body])), &calls);
    let rows = m.manifest.shards[0].row_count;
    let logits = served.unwrap().answer.payload;
    assert_eq!(
        logits.len(),
        8 * 4 * rows,
        "eight vectors, the section not one of them"
    );
    assert_eq!(logits[4..8], 0f32.to_le_bytes(), "token 1 allowed");
    assert_eq!(
        logits[..4],
        f32::NEG_INFINITY.to_le_bytes(),
        "token 0 masked"
    );
    // A section the shard's memory for bodies cannot hold (the default budget keeps 64 bodies of
    // 8 KiB): refused from the query before a byte is read.
    let query = Query {
        adjust: Some(MAX_ADJUST_BYTES),
        ..LOGITS
    };
    let calls = Calls::default();
    let framing = Framing::default();
    let e = serve_query(
        &query,
        &shard,
        &store,
        (framing, Some(vec![vec![0; 4]])),
        &calls,
    );
    let e = e.err().unwrap();
    assert_eq!(e.code.name(), "payload_too_large");
    assert!(e.detail.contains("send fewer adjustments"), "{}", e.detail);
    assert_eq!(calls.chunks.get(), 0);
}

#[test]
fn bad_framing_is_refused_before_the_slice_is_loaded() {
    let (store, shard, _) = uploaded(43);
    let too_large = (MAX_BODY_BYTES + 1).to_string();
    for (framing, code) in [
        (
            Framing {
                content_length: Some(&too_large),
                transfer_encoding: None,
            },
            "payload_too_large",
        ),
        (
            Framing {
                content_length: Some("12"),
                transfer_encoding: Some("chunked"),
            },
            "bad_framing",
        ),
    ] {
        let calls = Calls::default();
        let body = Some(vec![vec![0u8; 12]]);
        assert_eq!(error(serve(&shard, &store, framing, body, &calls)), code);
        assert_eq!((calls.resident.get(), calls.chunks.get()), (0, 0));
    }
}

#[test]
fn no_body_or_an_empty_one_is_411() {
    let (store, shard, _) = uploaded(44);
    for body in [None, Some(vec![]), Some(vec![vec![]])] {
        let calls = Calls::default();
        let r = serve(&shard, &store, Framing::default(), body, &calls);
        assert_eq!(error(r), "length_required");
    }
}
