//! Concurrent requests computed as one batch: requests that are ready at the same time share a
//! *pass*, one `mat_mat` call over up to `MAX_BATCH` hidden vectors, which costs far less than
//! computing each vector alone (the kernels read every weight block once per pass, not once per
//! vector). Every request still gets exactly the bits it would get alone — the kernels give each
//! vector of a batch the bits of a single `mat_vec` — in its own reply form and precision.
//!
//! An isolate runs one piece of JavaScript at a time, and a pass computes without awaiting, so
//! nothing can join a pass while it runs. What joins are the requests whose bodies arrived
//! while it ran: after its body is read and checked, a request *enqueues* its job and *yields*
//! to the event loop (the host's `next_turn`; in the Worker a zero-delay timer), so that every
//! request whose I/O completed meanwhile enqueues too. Before each turn a waiting request
//! decides, with `turns` the turns it has yielded so far:
//!
//! | its answer is there | `turns` | pass full | others arriving, or the isolate loaded | then |
//! |---|---|---|---|---|
//! | yes | any | any | any | return it |
//! | no | 0 | any | any | yield |
//! | no | 1 … [`MAX_TURNS`] − 1 | no | yes | yield |
//! | no | otherwise | | | run a pass |
//!
//! *Full*: `MAX_BATCH` vectors queued.
//! *Arriving*: requests counted in the isolate ([`Arrival`]) that have not queued their job yet.
//! *Loaded*: the last pass computed more than one job or left some queued. A lone caller is
//! never loaded and has nobody arriving: it yields once. Under load a request yields until its
//! pass is full or its turns are out, because callers' requests reach the isolate spread over
//! the others' passes (docs/BENCHMARKS-notes.md, "Passes fill only if requests wait for each
//! other", has the measurements). Without `next_turn` (coalescing off) it never yields.
//!
//! A pass takes the oldest waiting job and, in arrival order, the jobs of the same precision
//! that fit in `MAX_BATCH` vectors, computes them against the slice resident *now* and encodes
//! each job's answer in its own form. Whoever wakes first computes for the others; a job never
//! waits for one particular request, so a caller that went away stalls nobody: its job is
//! computed with the others' (the runtime may keep a request it never resumes), or leaves the
//! queue with its body buffer the moment the runtime drops the request.
//!
//! A request whose body ends with adjustments (`?adjust=LEN`: an allowed set, logit bias,
//! penalties; `cobordism_protocol::adjust`) has them decoded and checked when it queues (a bad
//! section fails alone, at once) and applied by the pass to its own logits only, before its
//! answer is encoded: requests with and without adjustments share a pass, and each gets the
//! bits it gets alone.
//!
//! Memory stays what `cobordism_protocol::MemoryNeed` counts: a waiting job holds the body
//! buffer it was received into (so the body pool still bounds how many wait) and its decoded
//! adjustments (a body with a section claims the slots of its section twice: received and
//! decoded), and one pass at a time holds the decoded vectors and logits of at most
//! `MAX_BATCH` vectors.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::rc::Rc;

use cobordism_protocol::adjust::{decode, split_body, Adjust, AdjustError};
use cobordism_protocol::{
    check_hidden, decode_hidden_into, ErrorCode, HiddenError, Query, MAX_BATCH,
};

use crate::bodies::Body;
use crate::error::{reserve, slice_loading, ShardError, REPLACED};
use crate::resident::Shard;

/// Most turns of the event loop a request yields for others to join its pass: the first always,
/// the others only while its pass is not full and other requests are arriving or the isolate is
/// loaded (the module's table).
pub const MAX_TURNS: usize = 8;

/// One request's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The encoded reply (its form, for its `n` vectors).
    pub payload: Vec<u8>,
    /// Hidden vectors in the request.
    pub n: usize,
    /// The slice's first global row and its rows.
    pub row_start: usize,
    /// Rows of the slice.
    pub row_count: usize,
    /// Rows of the whole lm-head.
    pub vocab: usize,
    /// The manifest version the logits come from.
    pub version: String,
    /// Vectors in the pass that computed it (this request's and the others').
    pub pass_vectors: usize,
}

type Slot = Rc<RefCell<Option<Result<Answer, ShardError>>>>;

/// A request waiting for a pass.
struct Job {
    query: Query,
    body: Body,
    /// One per vector, decoded from the end of the body; `None` without `?adjust`.
    adjusts: Option<Vec<Adjust>>,
    /// The hidden size the body was checked against, and its vectors.
    hidden: usize,
    n: usize,
    /// Where the pass leaves the answer; the request holds the other reference.
    answer: Slot,
}

/// How many passes computed how many vectors, since the isolate started (for `/healthz`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PassStats {
    /// `by_vectors[i]`: passes of `i + 1` vectors.
    pub by_vectors: [u64; MAX_BATCH],
    /// Requests the passes answered.
    pub requests: u64,
    /// Milliseconds the passes took on the host's clock (0 in production Workers, whose clock
    /// stands still while they compute).
    pub compute_ms: f64,
}

impl PassStats {
    /// Passes run.
    pub fn passes(&self) -> u64 {
        self.by_vectors.iter().sum()
    }

    /// Vectors computed.
    pub fn vectors(&self) -> u64 {
        (1..).zip(self.by_vectors).map(|(v, n)| v * n).sum()
    }
}

/// The waiting jobs of one isolate and its pass statistics.
#[derive(Default)]
pub struct Coalescer {
    queue: RefCell<VecDeque<Job>>,
    stats: Cell<PassStats>,
    /// Requests that reached the isolate and have not queued (or failed) yet.
    arriving: Rc<Cell<usize>>,
    /// Whether the last pass had company (more than one request, or others left waiting):
    /// under load, a pass waits its turns out to fill up; a lone caller does not wait.
    loaded: Cell<bool>,
}

/// A request on its way to a pass, from its arrival in the isolate until it queues or fails:
/// while some are, a waiting pass gives them more turns to join.
pub struct Arrival(Rc<Cell<usize>>);

impl Drop for Arrival {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

impl Coalescer {
    /// A coalescer with nothing waiting.
    pub fn new() -> Coalescer {
        Coalescer::default()
    }

    /// Passes so far.
    pub fn stats(&self) -> PassStats {
        self.stats.get()
    }

    /// Notes a request's arrival in the isolate (hold it until the request's body is in; the
    /// [`Coalescer::answer`] call takes it).
    pub fn arrive(&self) -> Arrival {
        self.arriving.set(self.arriving.get() + 1);
        Arrival(self.arriving.clone())
    }

    /// Vectors waiting for a pass now.
    fn queued_vectors(&self) -> usize {
        self.queue.borrow().iter().map(|j| j.n).sum()
    }

    /// Requests waiting for a pass now.
    pub fn waiting(&self) -> usize {
        self.queue.borrow().len()
    }

    /// The answer to one request whose body has been received into `body`: checked against the
    /// resident slice (a bad body or adjustments' section fails alone, at once), then computed
    /// in a pass with whatever requests are ready. With `next_turn` (coalescing on: a future
    /// that completes on the event loop's next turn), the request first awaits one turn so that
    /// requests whose bodies arrived meanwhile join, and more turns (at most [`MAX_TURNS`])
    /// while the pass is not full and other requests are on their way or the isolate is loaded
    /// (its last pass had company); without, it computes at once and alone unless others
    /// already wait. `now` is the host's clock, for the passes' time.
    pub async fn answer<Y: Future<Output = ()>>(
        &self,
        shard: &Shard,
        (arrival, body): (Arrival, Body),
        query: Query,
        next_turn: Option<impl Fn() -> Y>,
        now: fn() -> f64,
    ) -> Result<Answer, ShardError> {
        let (hidden, vocab) = shard
            .with_resident(|r| (r.manifest.hidden, r.manifest.vocab))
            .ok_or_else(|| slice_loading(REPLACED))?;
        let (n, adjusts) = body.with(|bytes| {
            let (vectors, section) = split_body(bytes, query.adjust).map_err(bad_adjust)?;
            let n = check_hidden(vectors, hidden).map_err(refused)?;
            let adjusts = match query.adjust {
                None => None,
                Some(_) => Some(decode(section, n, vocab as u32).map_err(bad_adjust)?),
            };
            Ok::<_, ShardError>((n, adjusts))
        })??;
        body.complete();
        let answer: Slot = Rc::default();
        self.queue.borrow_mut().push_back(Job {
            query,
            body,
            adjusts,
            hidden,
            n,
            answer: answer.clone(),
        });
        drop(arrival);
        let _waiting = Waiting {
            queue: &self.queue,
            answer: &answer,
        };
        let mut turns = 0;
        loop {
            if let Some(done) = answer.borrow_mut().take() {
                return done;
            }
            if let Some(next_turn) = &next_turn {
                let arriving = self.arriving.get() > 0 || self.loaded.get();
                let joining = turns < MAX_TURNS && self.queued_vectors() < MAX_BATCH && arriving;
                if turns == 0 || joining {
                    next_turn().await;
                    turns += 1;
                    continue;
                }
            }
            if !self.run_pass(shard, now) {
                return Err(ShardError::internal("a waiting request's job vanished"));
            }
        }
    }

    /// Takes the oldest job and the jobs of its precision that fit in `MAX_BATCH` vectors, in
    /// arrival order, computes them together and leaves each its answer; false if nothing
    /// waited.
    fn run_pass(&self, shard: &Shard, now: fn() -> f64) -> bool {
        let jobs = self.next_jobs();
        if jobs.is_empty() {
            return false;
        }
        let vectors: usize = jobs.iter().map(|j| j.n).sum();
        let started = now();
        let answers = shard
            .with_resident(|r| {
                let hidden = r.manifest.hidden;
                if jobs.iter().any(|j| j.hidden != hidden) {
                    // The slice was replaced by one of another shape since the bodies were
                    // checked: their vectors mean nothing to it.
                    return Err(slice_loading(REPLACED));
                }
                let mut xs = Vec::new();
                reserve(
                    &mut xs,
                    vectors * hidden,
                    format_args!("{vectors} vectors for a pass"),
                )?;
                for job in &jobs {
                    job.body
                        .with(|bytes| {
                            let (vectors, _) = split_body(bytes, job.query.adjust)?;
                            Ok(decode_hidden_into(vectors, hidden, &mut xs))
                        })?
                        .map_err(bad_adjust)?
                        .map_err(refused)?;
                }
                let mut logits = r.logits(&xs, vectors, jobs[0].query.precision)?;
                let (rows, row_start) = (r.entry.row_count, r.entry.row_start);
                let mut at = 0;
                Ok(jobs
                    .iter()
                    .map(|job| {
                        // The must-fail build "pass_slices" hands each request the logits of the
                        // pass's first vectors instead of its own.
                        let from = if cfg!(shard_perturb = "pass_slices") {
                            0
                        } else {
                            at
                        };
                        let mine = &mut logits[from * rows..(from + job.n) * rows];
                        at += job.n;
                        // The must-fail build "adjust_skipped" answers with the plain logits.
                        let adjusts = match cfg!(shard_perturb = "adjust_skipped") {
                            true => None,
                            false => job.adjusts.as_deref(),
                        };
                        let form = &job.query.form;
                        let payload = match adjusts {
                            None => form.encode(mine, rows, row_start as u32)?,
                            Some(a) => form.encode_adjusted(mine, rows, row_start as u32, a)?,
                        };
                        Ok(Answer {
                            payload,
                            n: job.n,
                            row_start,
                            row_count: rows,
                            vocab: r.manifest.vocab,
                            version: r.manifest.version.clone(),
                            pass_vectors: vectors,
                        })
                    })
                    .collect::<Vec<_>>())
            })
            .unwrap_or_else(|| Err(slice_loading(REPLACED)));
        self.loaded
            .set(jobs.len() > 1 || !self.queue.borrow().is_empty());
        let mut stats = self.stats.get();
        stats.by_vectors[vectors - 1] += 1;
        stats.requests += jobs.len() as u64;
        stats.compute_ms += now() - started;
        self.stats.set(stats);
        match answers {
            Ok(each) => {
                for (job, answer) in jobs.iter().zip(each) {
                    *job.answer.borrow_mut() = Some(answer);
                }
            }
            Err(e) => {
                for job in &jobs {
                    *job.answer.borrow_mut() = Some(Err(e.clone()));
                }
            }
        }
        true
    }

    /// The next pass's jobs: the oldest job and the later ones of its precision that fit.
    fn next_jobs(&self) -> Vec<Job> {
        let mut queue = self.queue.borrow_mut();
        let Some(precision) = queue.front().map(|j| j.query.precision) else {
            return Vec::new();
        };
        let (mut taken, mut vectors, mut i) = (Vec::new(), 0, 0);
        while i < queue.len() && vectors < MAX_BATCH {
            let job = &queue[i];
            // The must-fail build "mixed_precision" lets every precision into the pass.
            let same = job.query.precision == precision || cfg!(shard_perturb = "mixed_precision");
            if same && vectors + job.n <= MAX_BATCH {
                vectors += job.n;
                taken.extend(queue.remove(i));
            } else {
                i += 1;
            }
        }
        taken
    }
}

/// A request's place in the queue: when the request is dropped before its pass (its caller
/// went away and the runtime dropped it), its job leaves the queue and its body buffer goes
/// back to the pool at once.
struct Waiting<'a> {
    queue: &'a RefCell<VecDeque<Job>>,
    answer: &'a Slot,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.queue
            .borrow_mut()
            .retain(|j| !Rc::ptr_eq(&j.answer, self.answer));
    }
}

/// `400 bad_adjust` for an adjustments' section that is wrong.
fn bad_adjust(e: AdjustError) -> ShardError {
    ShardError::new(ErrorCode::BadAdjust, e.0)
}

/// `400` for a body that is not `n` finite hidden vectors.
fn refused(e: HiddenError) -> ShardError {
    let code = match e {
        HiddenError::NonFinite { .. } => ErrorCode::NonFinite,
        _ => ErrorCode::BadLength,
    };
    ShardError::new(code, e.to_string())
}
