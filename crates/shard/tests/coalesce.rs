//! The coalescer natively: concurrent requests, each polled by hand up to its yield, share
//! passes of up to `MAX_BATCH` vectors and still get exactly the answer they get alone.

mod common;

use std::future::Future;
use std::pin::{pin, Pin};
use std::task::{Context, Poll};

use cobordism_protocol::adjust::{append_section, Adjust};
use cobordism_protocol::{Form, Precision, Query, TopK};
use cobordism_shard::{Answer, Body, BodyPool, Coalescer, Host, Shard, ShardError, MAX_TURNS};
use kquant::synth::SplitMix64;

use common::{block_on, loaded, logits_of, model, poll_once, settings, Model, Store, HIDDEN};

/// The host's yield: pending once, then ready (the event loop ran others meanwhile).
#[derive(Default)]
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

const CAP: usize = 8 * 4 * HIDDEN;

/// A clock that reads 0, as production Workers' does while they compute.
fn clock() -> f64 {
    0.0
}

/// `n` seeded hidden vectors as a request body.
fn hidden(seed: u64, n: usize) -> Vec<u8> {
    let mut rng = SplitMix64::new(seed);
    (0..n * HIDDEN)
        .flat_map(|_| rng.normal().to_le_bytes())
        .collect()
}

/// A body received into `pool`.
fn received(pool: &BodyPool, bytes: &[u8]) -> Result<Body, ShardError> {
    let cap = bytes.len().max(CAP);
    let body = pool.acquire(64, 1, cap, 0.0)?;
    body.push(bytes, cap, 0.0)?;
    Ok(body)
}

/// One request as the Worker makes it, coalescing on.
struct Ask {
    bytes: Vec<u8>,
    precision: Precision,
    form: Form,
    /// The bytes of the adjustments' section at the end of `bytes`.
    adjust: Option<usize>,
}

impl Ask {
    fn query(&self) -> Query {
        Query {
            adjust: self.adjust,
            ..Query::plain(self.form.clone(), self.precision)
        }
    }
}

fn ask(seed: u64, n: usize) -> Ask {
    Ask {
        bytes: hidden(seed, n),
        precision: Precision::Exact,
        form: Form::Logits,
        adjust: None,
    }
}

/// The answer `a` gets alone: its own coalescer, no yield, nothing else waiting.
fn alone(shard: &Shard, a: &Ask) -> Result<Answer, ShardError> {
    let pool = BodyPool::default();
    let body = received(&pool, &a.bytes)?;
    let c = Coalescer::new();
    block_on(c.answer(
        shard,
        (c.arrive(), body),
        a.query(),
        None::<fn() -> YieldOnce>,
        clock,
    ))
}

/// One request of `a` with coalescing on, received into `pool`, not polled yet.
fn start<'a>(
    c: &'a Coalescer,
    shard: &'a Shard,
    pool: &BodyPool,
    a: &Ask,
) -> Pin<Box<impl Future<Output = Result<Answer, ShardError>> + use<'a>>> {
    let body = received(pool, &a.bytes).unwrap();
    Box::pin(c.answer(
        shard,
        (c.arrive(), body),
        a.query(),
        Some(YieldOnce::default),
        clock,
    ))
}

/// Runs `asks` as concurrent requests: each is polled up to its yield, then all run to their
/// end in order; returns their answers and the coalescer.
fn together(shard: &Shard, asks: &[Ask]) -> (Vec<Result<Answer, ShardError>>, Coalescer) {
    let (pool, c) = (BodyPool::default(), Coalescer::new());
    let mut futures: Vec<_> = asks
        .iter()
        .map(|a| {
            let body = received(&pool, &a.bytes);
            let c = &c;
            Box::pin(async move {
                c.answer(
                    shard,
                    (c.arrive(), body?),
                    a.query(),
                    Some(YieldOnce::default),
                    clock,
                )
                .await
            })
        })
        .collect();
    let first: Vec<_> = futures.iter_mut().map(|f| poll_once(f.as_mut())).collect();
    let answers = futures
        .into_iter()
        .zip(first)
        .map(|(f, first)| match first {
            Poll::Ready(done) => done,
            Poll::Pending => block_on(f),
        })
        .collect();
    drop(pool);
    (answers, c)
}

/// Everything but `pass_vectors`, which says how the answer was computed.
fn bits(a: &Answer) -> (Vec<u8>, usize, usize, String) {
    (a.payload.clone(), a.n, a.row_start, a.version.clone())
}

fn shard_of(m: &Model) -> (Store, Shard) {
    loaded(m, &settings(2))
}

#[test]
fn ready_requests_join_one_pass_and_get_the_bits_they_get_alone() {
    let m = model(1, 2);
    let (_store, shard) = shard_of(&m);
    let asks = vec![ask(1, 1), ask(2, 1), ask(3, 2)];
    let (answers, c) = together(&shard, &asks);
    assert_eq!(c.stats().by_vectors[3], 1, "one pass of 4 vectors");
    assert_eq!(c.stats().passes(), 1);
    for (a, got) in asks.iter().zip(&answers) {
        let got = got.as_ref().unwrap();
        assert_eq!(got.pass_vectors, 4);
        assert_eq!(bits(got), bits(&alone(&shard, a).unwrap()));
    }
    // And alone is kquant's own mat_vec, an oracle that shares no code with the coalescer.
    let x: Vec<f32> = (0..HIDDEN).map(|i| (i as f32 * 0.37).sin()).collect();
    let one = Ask {
        bytes: x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ..ask(0, 1)
    };
    let (answers, _) = together(&shard, &[ask(9, 3), one]);
    let payload = &answers[1].as_ref().unwrap().payload;
    let got: Vec<u32> = payload
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(got, logits_of(&m, 0));
}

#[test]
fn a_pass_holds_at_most_eight_vectors() {
    let m = model(2, 2);
    let (_store, shard) = shard_of(&m);
    let asks: Vec<Ask> = (0..5).map(|i| ask(10 + i, 2)).collect();
    let (answers, c) = together(&shard, &asks);
    let s = c.stats();
    assert_eq!((s.by_vectors[7], s.by_vectors[1], s.passes()), (1, 1, 2));
    assert_eq!(s.vectors(), 10);
    for (a, got) in asks.iter().zip(&answers) {
        assert_eq!(
            bits(got.as_ref().unwrap()),
            bits(&alone(&shard, a).unwrap())
        );
    }
    let nine: Vec<Ask> = (0..9).map(|i| ask(20 + i, 1)).collect();
    let (_, c) = together(&shard, &nine);
    assert_eq!((c.stats().by_vectors[7], c.stats().by_vectors[0]), (1, 1));
}

#[test]
fn precisions_and_forms_never_mix_in_a_way_that_changes_an_answer() {
    let m = model(3, 2);
    let (_store, shard) = shard_of(&m);
    let with = |seed, precision, form: &str| Ask {
        precision,
        form: Form::parse(form.split('&').filter_map(|p| p.split_once('='))).unwrap(),
        ..ask(seed, 1)
    };
    let asks = vec![
        with(1, Precision::Exact, "top_k=3"),
        with(2, Precision::Int8, ""),
        with(3, Precision::Exact, "temperature=0.7&seed=5"),
        with(4, Precision::Int8, "tokens=1,5,60"),
        with(5, Precision::Exact, ""),
    ];
    let (answers, c) = together(&shard, &asks);
    let s = c.stats();
    assert_eq!(
        (s.by_vectors[2], s.by_vectors[1], s.passes()),
        (1, 1, 2),
        "exact ×3, int8 ×2"
    );
    for (a, got) in asks.iter().zip(&answers) {
        assert_eq!(
            bits(got.as_ref().unwrap()),
            bits(&alone(&shard, a).unwrap())
        );
    }
    assert_ne!(
        answers[1].as_ref().unwrap().payload,
        alone(&shard, &ask(2, 1)).unwrap().payload,
        "int8 is not exact: the precision was kept"
    );
}

#[test]
fn a_bad_body_fails_alone_and_at_once() {
    let m = model(4, 2);
    let (_store, shard) = shard_of(&m);
    let mut nan = hidden(7, 1);
    nan[8..12].copy_from_slice(&f32::NAN.to_le_bytes());
    let short = hidden(8, 1)[..100].to_vec();
    let asks = vec![
        ask(1, 1),
        Ask {
            bytes: nan,
            ..ask(0, 1)
        },
        ask(2, 1),
        Ask {
            bytes: short,
            ..ask(0, 1)
        },
        ask(3, 1),
    ];
    let (answers, c) = together(&shard, &asks);
    assert_eq!(answers[1].as_ref().unwrap_err().code.name(), "non_finite");
    assert_eq!(answers[3].as_ref().unwrap_err().code.name(), "bad_length");
    assert_eq!(
        c.stats().by_vectors[2],
        1,
        "the three good ones in one pass"
    );
    for i in [0, 2, 4] {
        assert_eq!(
            bits(answers[i].as_ref().unwrap()),
            bits(&alone(&shard, &asks[i]).unwrap())
        );
    }
}

#[test]
fn an_abandoned_request_stalls_nobody_and_gives_its_buffer_back() {
    let m = model(5, 2);
    let (_store, shard) = shard_of(&m);
    let (pool, c) = (BodyPool::default(), Coalescer::new());
    let start = |a: &Ask| start(&c, &shard, &pool, a);
    let (a, b, d) = (ask(1, 1), ask(2, 1), ask(3, 1));
    // `a` is dropped after its first poll (its caller went away and the runtime dropped it),
    // `b` is never polled again (the runtime keeps it but never resumes it).
    let mut fa = start(&a);
    let mut fb = start(&b);
    assert!(poll_once(fa.as_mut()).is_pending());
    assert!(poll_once(fb.as_mut()).is_pending());
    drop(fa);
    assert_eq!(
        pool.in_flight(),
        1,
        "the dropped request's buffer is back: only b's is held"
    );
    let got = block_on(start(&d)).unwrap();
    assert_eq!(bits(&got), bits(&alone(&shard, &d).unwrap()));
    assert_eq!(
        got.pass_vectors, 2,
        "b's job was computed with d's, a's skipped"
    );
    assert_eq!(c.waiting(), 0);
    assert_eq!(
        pool.in_flight(),
        0,
        "b's buffer went back when its pass ran"
    );
    assert_eq!(
        bits(&block_on(fb).unwrap()),
        bits(&alone(&shard, &b).unwrap())
    );
}

#[test]
fn waiting_bodies_count_against_the_pool() {
    let m = model(6, 2);
    let (_store, shard) = shard_of(&m);
    let (pool, c) = (BodyPool::default(), Coalescer::new());
    let asks: Vec<Ask> = (0..3).map(|i| ask(i, 1)).collect();
    let mut futures: Vec<_> = asks
        .iter()
        .map(|a| {
            let body = pool.acquire(2, 1, CAP, 0.0);
            let c = &c;
            let shard = &shard;
            Box::pin(async move {
                let body = body?;
                body.push(&a.bytes, CAP, 0.0)?;
                c.answer(
                    shard,
                    (c.arrive(), body),
                    a.query(),
                    Some(YieldOnce::default),
                    clock,
                )
                .await
            })
        })
        .collect();
    let mut polls: Vec<_> = futures.iter_mut().map(|f| poll_once(f.as_mut())).collect();
    let third = polls.pop().unwrap();
    assert!(polls.iter().all(Poll::is_pending));
    let busy = match third {
        Poll::Ready(Err(e)) => e.code.name(),
        _ => "not refused",
    };
    assert_eq!(
        busy, "busy",
        "the third finds both buffers held by waiting requests"
    );
    // A waiting body is never taken over as stalled, however long its pass takes to come.
    assert!(pool.acquire(2, 1, CAP, 1e12).is_err());
    futures.pop();
    let answers: Vec<_> = futures.into_iter().map(block_on).collect();
    assert!(answers.iter().all(Result::is_ok));
    assert_eq!(c.stats().by_vectors[1], 1);
}

#[test]
fn a_version_switch_while_requests_wait_gives_the_new_versions_bits() {
    let (a, b) = (model(7, 2), model(8, 2));
    let cfg = settings(2);
    let (store, shard) = loaded(&a, &cfg);
    let (pool, c) = (BodyPool::default(), Coalescer::new());
    let r = ask(1, 1);
    let body = received(&pool, &r.bytes).unwrap();
    let mut waiting = pin!(c.answer(
        &shard,
        (c.arrive(), body),
        r.query(),
        Some(YieldOnce::default),
        clock
    ));
    assert!(poll_once(waiting.as_mut()).is_pending());
    store.upload(&b);
    store.advance(cfg.manifest_ttl_ms + 1.0);
    block_on(shard.ensure(&cfg, &store)).unwrap();
    assert_eq!(common::answer(&shard), Some(b.manifest.version.clone()));
    let got = block_on(waiting).unwrap();
    assert_eq!(got.version, b.manifest.version);
    assert_eq!(bits(&got), bits(&alone(&shard, &r).unwrap()));
    let _ = store.now_ms();
}

#[test]
fn a_request_waits_for_requests_on_their_way_but_not_forever() {
    let m = model(9, 2);
    let (_store, shard) = shard_of(&m);
    let (pool, c) = (BodyPool::default(), Coalescer::new());
    let (a, b) = (ask(1, 1), ask(2, 1));
    let body_a = received(&pool, &a.bytes).unwrap();
    let mut fa = pin!(c.answer(
        &shard,
        (c.arrive(), body_a),
        a.query(),
        Some(YieldOnce::default),
        clock
    ));
    // b has arrived and its body is on its way: a keeps yielding instead of computing alone.
    let arrival_b = c.arrive();
    let body_b = pool.acquire(64, 1, CAP, 0.0).unwrap();
    body_b.push(&b.bytes[..100], CAP, 0.0).unwrap();
    for _ in 0..4 {
        assert!(poll_once(fa.as_mut()).is_pending());
    }
    assert_eq!(c.stats().passes(), 0);
    body_b.push(&b.bytes[100..], CAP, 0.0).unwrap();
    let mut fb = pin!(c.answer(
        &shard,
        (arrival_b, body_b),
        b.query(),
        Some(YieldOnce::default),
        clock
    ));
    assert!(poll_once(fb.as_mut()).is_pending());
    let got_a = block_on(fa).unwrap();
    assert_eq!(got_a.pass_vectors, 2, "b joined a's pass");
    assert_eq!(bits(&got_a), bits(&alone(&shard, &a).unwrap()));
    assert_eq!(
        bits(&block_on(fb).unwrap()),
        bits(&alone(&shard, &b).unwrap())
    );

    // A request whose body never completes holds a pass back for at most MAX_TURNS turns.
    let trickle = c.arrive();
    let d = ask(3, 1);
    let body_d = received(&pool, &d.bytes).unwrap();
    let mut fd = pin!(c.answer(
        &shard,
        (c.arrive(), body_d),
        d.query(),
        Some(YieldOnce::default),
        clock
    ));
    let mut polls = 1;
    while poll_once(fd.as_mut()).is_pending() {
        polls += 1;
        assert!(
            polls <= 2 * (MAX_TURNS + 1),
            "still waiting after {polls} polls"
        );
    }
    assert_eq!(c.stats().by_vectors[0], 1, "d computed alone");
    drop(trickle);
}

#[test]
fn under_load_a_pass_waits_its_turns_to_fill_up_a_lone_caller_does_not() {
    let m = model(10, 2);
    let (_store, shard) = shard_of(&m);
    let (pool, c) = (BodyPool::default(), Coalescer::new());
    let start = |a: &Ask| start(&c, &shard, &pool, a);
    /// Polls until done: the answer and the polls it took (one per turn waited, plus the last).
    fn polls<F: Future + Unpin>(mut f: F) -> (F::Output, usize) {
        let mut n = 1;
        loop {
            if let Poll::Ready(v) = poll_once(Pin::new(&mut f)) {
                return (v, n);
            }
            n += 1;
        }
    }
    let (lone, n) = polls(start(&ask(1, 1)));
    assert_eq!(
        (lone.unwrap().pass_vectors, n),
        (1, 2),
        "alone: one turn, then its pass"
    );
    // Two at once: the pass had company, so the isolate counts as loaded.
    let (mut a, mut b) = (start(&ask(2, 1)), start(&ask(3, 1)));
    assert!(poll_once(a.as_mut()).is_pending() && poll_once(b.as_mut()).is_pending());
    assert_eq!(block_on(a).unwrap().pass_vectors, 2);
    assert_eq!(block_on(b).unwrap().pass_vectors, 2);
    // Under load a request waits up to MAX_TURNS turns for company before computing alone...
    let (d, n) = polls(start(&ask(4, 1)));
    assert_eq!((d.unwrap().pass_vectors, n), (1, MAX_TURNS + 1));
    // ...after which the isolate is no longer loaded: the next lone caller waits one turn.
    let (e, n) = polls(start(&ask(5, 1)));
    assert_eq!((e.unwrap().pass_vectors, n), (1, 2));
}

/// `ask(seed, n)` in `form` with a section of `adjusts` (one per vector) after the vectors.
fn adjusted(seed: u64, form: &str, adjusts: &[Adjust]) -> Ask {
    let mut bytes = hidden(seed, adjusts.len());
    let adjust = append_section(&mut bytes, adjusts);
    Ask {
        bytes,
        form: Form::parse(form.split('&').filter_map(|p| p.split_once('='))).unwrap(),
        adjust,
        ..ask(seed, adjusts.len())
    }
}

fn floats(payload: &[u8]) -> Vec<f32> {
    payload
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[test]
fn each_request_keeps_its_own_adjustments_in_a_shared_pass() {
    let m = model(6, 2);
    let (_store, shard) = shard_of(&m);
    let allow_5_to_9 = Adjust {
        allowed: Some(vec![(5, 9)]),
        bias: vec![(6, 2.0)],
        ..Adjust::none()
    };
    let only_7 = Adjust {
        allowed: Some(vec![(7, 8)]),
        ..Adjust::none()
    };
    let penalized = Adjust {
        presence: 0.5,
        frequency: 0.25,
        repetition: 1.5,
        history: Adjust::count_history(&[3, 3, 40, 1]),
        ..Adjust::none()
    };
    let asks = vec![
        ask(1, 1),
        adjusted(2, "", &[allow_5_to_9.clone(), Adjust::none()]),
        adjusted(3, "temperature=0.9&seed=4", &[only_7]),
        adjusted(4, "top_k=5", &[penalized]),
        adjusted(2, "", &[Adjust::none(), allow_5_to_9]),
    ];
    let (answers, c) = together(&shard, &asks);
    assert_eq!(
        c.stats().passes(),
        1,
        "adjusted and plain requests share a pass"
    );
    for (a, got) in asks.iter().zip(&answers) {
        assert_eq!(
            bits(got.as_ref().unwrap()),
            bits(&alone(&shard, a).unwrap())
        );
    }
    // The oracle: the plain logits of the same vectors, adjusted by hand.
    let plain = floats(&alone(&shard, &ask(2, 2)).unwrap().payload);
    let rows = plain.len() / 2;
    for (answer, adjusted_vector) in [(1, 0), (4, 1)] {
        let got = floats(&answers[answer].as_ref().unwrap().payload);
        for (i, (&z, &want)) in got.iter().zip(&plain).enumerate() {
            let (v, row) = (i / rows, i % rows);
            let want = match row {
                _ if v != adjusted_vector => want,
                6 => want + 2.0,
                5..=8 => want,
                _ => f32::NEG_INFINITY,
            };
            assert_eq!(
                z.to_bits(),
                want.to_bits(),
                "answer {answer}, vector {v}, row {row}"
            );
        }
    }
    let winner = TopK::decode_all(&answers[2].as_ref().unwrap().payload).unwrap();
    assert_eq!(winner[0].entries[0].0, 7, "the only allowed token wins");
}

#[test]
fn a_bad_adjustments_section_fails_alone() {
    let m = model(7, 2);
    let (_store, shard) = shard_of(&m);
    let past_vocab = adjusted(
        2,
        "top_k=2",
        &[Adjust {
            history: vec![(common::VOCAB as u32, 1)],
            ..Adjust::none()
        }],
    );
    let mut cut = adjusted(
        3,
        "top_k=2",
        &[Adjust {
            presence: 1.0,
            ..Adjust::none()
        }],
    );
    cut.bytes.pop();
    cut.adjust = cut.adjust.map(|len| len - 1);
    let mut longer = adjusted(
        4,
        "",
        &[Adjust {
            presence: 1.0,
            ..Adjust::none()
        }],
    );
    longer.adjust = Some(longer.bytes.len() + 1);
    let asks = vec![ask(1, 1), past_vocab, cut, longer, ask(5, 1)];
    let (answers, c) = together(&shard, &asks);
    for (i, why) in [(1, "vocabulary"), (2, "end early"), (3, "body has only")] {
        let e = answers[i].as_ref().unwrap_err();
        assert_eq!(e.code.name(), "bad_adjust");
        assert!(e.detail.contains(why), "{}", e.detail);
    }
    assert_eq!(c.stats().by_vectors[1], 1, "the two good ones in one pass");
}
