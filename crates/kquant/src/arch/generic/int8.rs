//! The opt-in fast mode: activations quantized to 8 bits, integer dot products.
//!
//! # Its canonical order
//!
//! Per call, each 256-column block `b` of `x` is quantized as ggml's `Q8_K` does:
//!
//! ```text
//! amax_b = max |x_i|                        (NaN or ±inf anywhere in x: the whole result is NaN)
//! dx_b   = amax_b / 127                     (0 when amax_b = 0, and then every xq is 0)
//! xq_i   = clamp(nearest_int(x_i · (127 / amax_b)), −127, 127)     ties to even
//! bsum_g = Σ xq over the 16 columns of group g
//! ```
//!
//! Per row, with integer sums that are exact (so their order does not matter and every backend
//! may use its best instructions) and one fixed float epilogue per super-block:
//!
//! ```text
//! Q6_K:  S   = Σ_j sc_j · (Σ_{i in j} q_i·xq_i − 32·bsum_j)          i32, |S| < 2³¹
//!            (= Σ_j sc_j · Σ_{i in j} (q_i − 32)·xq_i, the form packed6 blocks give)
//!        acc = acc + (d·dx_b) · f32(S)
//! Q4_K:  S   = Σ_j sc_{j/2} · Σ_{i in j} q_i·xq_i,   M = Σ_s m_s · (bsum_2s + bsum_2s+1)
//!        acc = acc + ((d·dx_b) · f32(S) − (dmin·dx_b) · f32(M))
//! result = acc after the last super-block (acc starts at +0.0)
//! ```
//!
//! `d`, `dmin` are the block's f16 scales as f32, `q` the unsigned quants (0..63, 0..15),
//! `sc`/`m` the sub-block scales and mins. The quantization of `x` costs about 7e-3 of
//! max |y| in accuracy (measured in `tests/int8.rs`); the exact kernels stay near 1e-7.
//!
//! A one-vector pass (the decode case) takes `S` and `M` from the backend where it has its own
//! integer code for them (`Vector::q6k_int8_sums`, `q4k_int8_sums`: AVX2 and AVX-512 for runs
//! of one to four blocks, simd128 for one, and for Q4_K four), mostly four at a time
//! ([`one_vector`]); the float epilogue is here ([`q6k_term`], [`q4k_term`]), but for runs of
//! four where the backend computes their terms lane by lane with the same operations
//! (`Vector::q6k_int8_terms`, `q4k_int8_terms`: AVX2, AVX-512 and simd128), and the terms are
//! added in block order, for every backend and pass.
//!
//! Blocks in the interleaved layout (`crate::interleaved`) take their sums from
//! `Vector::q6k_interleaved_int8_sums` / `q4k_interleaved_int8_sums` (simd128) against a copy of
//! the activation quants permuted the same way ([`PreparedInterleaved`]), in every pass one
//! vector after the other; a backend without them runs the kernel of ggml's layout on each row
//! converted back.
//!
//! A one-vector pass takes four rows at once where the backend has the sums of a block of each
//! against the same block of the vector ([`four_rows`]: `Vector::q6k_int8_four_row_sums`,
//! `q4k_int8_four_row_sums`: AVX2 and AVX-512; `q6k_interleaved_int8_four_row_sums`,
//! `q4k_interleaved_int8_four_row_sums`: simd128); each row's terms are the ones
//! [`one_vector`] computes, added in block order, so each row's result is the same bits.

use core::marker::PhantomData;

use super::{q4k_chunk, Q6Block, RowKernel, Vector};
use crate::quantize::nearest_int;

/// `nearest_int` (ties to even); the must-fail build `KQUANT_PERTURB=ties` rounds ties
/// away from zero instead.
#[inline(always)]
fn round(t: f32) -> i32 {
    let r = nearest_int(t);
    let tie = (t - r as f32) == 0.5 || (t - r as f32) == -0.5;
    if cfg!(kquant_perturb = "ties") && tie {
        (t + if t > 0.0 { 0.5 } else { -0.5 }) as i32
    } else {
        r
    }
}
use crate::{BlockQ4K, BlockQ4KInterleaved, BlockQ6K, BlockQ6KInterleaved, QK_K};

/// f32-sized words of prepared activations for `cols` columns: the quants as i8 (four per
/// word) and as i16 (two per word; backends without an 8-bit multiply use these), one scale per
/// block, one i16 sum per 16 columns (|sum| ≤ 16·127); for the interleaved layout
/// (`interleaved`) also the i8 quants and the sums again, permuted as its blocks
/// ([`PreparedInterleaved`]).
pub(crate) const fn prepared_len(cols: usize, interleaved: bool) -> usize {
    let plain = cols / 4 + cols / 2 + cols / QK_K + cols / 32;
    if interleaved {
        plain.saturating_add(cols / 4 + cols / 32) // saturating: callers' absurd shapes
    } else {
        plain
    }
}

/// A prepared vector, viewed in its parts, per block of 256 columns.
#[derive(Clone, Copy)]
pub(super) struct Prepared<'a> {
    xq8: &'a [[i8; QK_K]],
    xq16: &'a [[i16; QK_K]],
    dx: &'a [f32],
    bsums: &'a [[i16; 16]],
}

/// Block `i` of a [`Prepared`] vector: fixed-size arrays, so that the kernels' constant offsets
/// into them need no bounds checks.
struct PreparedBlock<'a> {
    xq8: &'a [i8; QK_K],
    xq16: &'a [i16; QK_K],
    dx: f32,
    bsums: &'a [i16; 16],
}

/// The parts of a [`Prepared`] vector that a one-vector pass reads (it has no use for the i16
/// quants), from its next block on.
#[derive(Clone, Copy)]
struct RunParts<'a> {
    xq8: &'a [[i8; QK_K]],
    dx: &'a [f32],
    bsums: &'a [[i16; 16]],
}

/// `K` consecutive blocks of a [`Prepared`] vector, for the one-vector pass's runs of blocks.
struct PreparedRun<'a, const K: usize> {
    xq8: &'a [[i8; QK_K]; K],
    dx: &'a [f32; K],
    bsums: &'a [[i16; 16]; K],
}

impl<'a> RunParts<'a> {
    /// The first `K` blocks and the rest, `None` where fewer are left.
    #[inline(always)]
    fn split_run<const K: usize>(&self) -> Option<(PreparedRun<'a, K>, RunParts<'a>)> {
        let (xq8, xq8_rest) = self.xq8.split_first_chunk()?;
        let (dx, dx_rest) = self.dx.split_first_chunk()?;
        let (bsums, bsums_rest) = self.bsums.split_first_chunk()?;
        let rest = RunParts {
            xq8: xq8_rest,
            dx: dx_rest,
            bsums: bsums_rest,
        };
        Some((PreparedRun { xq8, dx, bsums }, rest))
    }
}

impl<'a> Prepared<'a> {
    /// What a one-vector pass reads.
    #[inline(always)]
    fn run_parts(&self) -> RunParts<'a> {
        RunParts {
            xq8: self.xq8,
            dx: self.dx,
            bsums: self.bsums,
        }
    }
    #[inline(always)]
    fn block(&self, i: usize) -> PreparedBlock<'a> {
        PreparedBlock {
            xq8: &self.xq8[i],
            xq16: &self.xq16[i],
            dx: self.dx[i],
            bsums: &self.bsums[i],
        }
    }
}

/// A prepared vector for blocks in the interleaved layout: its parts as [`Prepared`] gives
/// them, and the same vector with its i8 quants in the order of the layout's bytes
/// (`crate::interleaved::permute_quants`) and each block's 16 group sums as even groups, then odd
/// ones (the order of a [`BlockQ6KInterleaved`]'s scales).
#[derive(Clone, Copy)]
pub(super) struct PreparedInterleaved<'a> {
    plain: Prepared<'a>,
    permuted: Prepared<'a>,
}

/// Splits a prepared vector for the interleaved layout into its parts.
#[inline(always)]
fn parts_interleaved(prepared: &[f32]) -> PreparedInterleaved<'_> {
    let cols = prepared.len() / 273 * 256; // prepared_len(cols, true) = cols · 273/256
    let (plain, rest) = prepared.split_at(prepared_len(cols, false));
    let plain = parts(plain);
    let (xq8, bsums) = rest.split_at(cols / 4);
    let permuted = Prepared {
        xq8: bytemuck::cast_slice::<f32, i8>(xq8).as_chunks().0,
        bsums: bytemuck::cast_slice::<f32, i16>(bsums).as_chunks().0,
        ..plain
    };
    PreparedInterleaved { plain, permuted }
}

/// The group sums of a block in the order of a [`BlockQ6KInterleaved`]'s scales: even groups,
/// then odd ones.
fn interleaved_sums(bsums: &[i16; 16]) -> [i16; 16] {
    core::array::from_fn(|k| bsums[2 * (k % 8) + k / 8])
}

/// Splits a prepared vector into its parts.
#[inline(always)]
fn parts(prepared: &[f32]) -> Prepared<'_> {
    let cols = prepared.len() / 201 * 256; // prepared_len(cols, false) = cols · 201/256
    let (xq8, rest) = prepared.split_at(cols / 4);
    let (xq16, rest) = rest.split_at(cols / 2);
    let (dx, bsums) = rest.split_at(cols / QK_K);
    Prepared {
        xq8: bytemuck::cast_slice::<f32, i8>(xq8).as_chunks().0,
        xq16: bytemuck::cast_slice::<f32, i16>(xq16).as_chunks().0,
        dx,
        bsums: bytemuck::cast_slice::<f32, i16>(bsums).as_chunks().0,
    }
}

/// The largest `|x|`'s bits: for finite floats the order of their bit patterns with the sign
/// cleared is theirs, and ±inf and NaN lie above every finite one. An integer maximum, which
/// LLVM vectorizes (`all(is_finite)` and a float compare and select stay one lane at a time,
/// and a float `max` becomes `f32x4.relaxed_max` in a relaxed-SIMD module, whose NaN and ±0
/// results the engine picks).
fn abs_bits_max(xs: &[f32]) -> u32 {
    xs.iter().fold(0, |m, v| m.max(v.to_bits() & !(1 << 31)))
}

/// Quantizes `x` (whole blocks of 256) into `prepared` (see the module docs), with the
/// interleaved layout's permuted parts if `interleaved` ([`prepared_len`]).
pub(crate) fn prepare(x: &[f32], prepared: &mut [f32], interleaved: bool) {
    let cols = x.len();
    let (plain, permuted) = prepared.split_at_mut(prepared_len(cols, false));
    prepare_plain(x, plain);
    if interleaved {
        let plain = parts(plain);
        let (xq8, bsums) = permuted.split_at_mut(cols / 4);
        let xq8: &mut [[i8; QK_K]] = bytemuck::cast_slice_mut::<f32, i8>(xq8).as_chunks_mut().0;
        let bsums: &mut [[i16; 16]] = bytemuck::cast_slice_mut::<f32, i16>(bsums)
            .as_chunks_mut()
            .0;
        for (out, x) in xq8.iter_mut().zip(plain.xq8) {
            *out = crate::interleaved::permute_quants(x);
        }
        for (out, sums) in bsums.iter_mut().zip(plain.bsums) {
            *out = interleaved_sums(sums);
        }
    }
}

/// [`prepare`]'s parts that every layout reads.
fn prepare_plain(x: &[f32], prepared: &mut [f32]) {
    let cols = x.len();
    let (xq8, rest) = prepared.split_at_mut(cols / 4);
    let (xq, rest) = rest.split_at_mut(cols / 2);
    let (dx, bsums) = rest.split_at_mut(cols / QK_K);
    let xq8: &mut [i8] = bytemuck::cast_slice_mut(xq8);
    let xq: &mut [i16] = bytemuck::cast_slice_mut(xq);
    let bsums: &mut [i16] = bytemuck::cast_slice_mut(bsums);
    // Each block's largest |x| first (kept in `dx` until the block's scale replaces it): all
    // finite, or the whole result is NaN.
    for (amax, block) in dx.iter_mut().zip(x.chunks_exact(QK_K)) {
        *amax = f32::from_bits(abs_bits_max(block));
    }
    let finite = dx
        .iter()
        .all(|amax| amax.to_bits() < f32::INFINITY.to_bits());
    for (b, block) in x.chunks_exact(QK_K).enumerate() {
        let amax = dx[b];
        let q = &mut xq[QK_K * b..QK_K * (b + 1)];
        if !finite || amax == 0.0 {
            q.fill(0);
            dx[b] = if finite { 0.0 } else { f32::NAN };
        } else {
            let iscale = 127.0 / amax;
            for (qi, &v) in q.iter_mut().zip(block) {
                *qi = round(v * iscale).clamp(-127, 127) as i16;
            }
            dx[b] = amax / 127.0;
        }
        for (g, sum) in bsums[16 * b..16 * (b + 1)].iter_mut().enumerate() {
            *sum = q[16 * g..16 * (g + 1)].iter().sum(); // ≤ 16·127: fits i16
        }
    }
    for (narrow, &wide) in xq8.iter_mut().zip(xq.iter()) {
        *narrow = wide as i8; // |wide| ≤ 127
    }
}

/// A Q6_K block's term of the row's sum, the float epilogue of the canonical order:
/// `(d·dx)·f32(S)`.
#[inline(always)]
fn q6k_term(d: f32, dx: f32, total: i32) -> f32 {
    (d * dx) * total as f32
}

/// A Q4_K block's term: `(d·dx)·f32(S) − (dmin·dx)·f32(M)`, with `(S, M)` as `sums`.
#[inline(always)]
fn q4k_term(d: f32, dmin: f32, dx: f32, (total, mins): (i32, i32)) -> f32 {
    (d * dx) * total as f32 - (dmin * dx) * mins as f32
}

/// Adds chunk `c` of step `s` of a Q6_K block, `Σ q·scale·xq` against each vector, to `sums`.
#[inline(always)]
fn add_q6_chunk<V: Vector, B: Q6Block, const N: usize>(
    v: V,
    b: &B,
    (s, c): (usize, usize),
    sc: &[i16; 16],
    xb: &[PreparedBlock; N],
    sums: &mut [V::U; N],
) {
    let q = b.int8_chunk(v, s, c);
    // Chunk j = s·(16 / LANES) + c covers weights 4·LANES·j.. (and groups LANES·j / 4..):
    // written so, the flat loop's (j / k, j mod k) folds back to j.
    let j = s * (16 / V::LANES) + c;
    let at = 4 * V::LANES * j;
    let scales = &sc[V::LANES * j / 4..];
    for (sum, x) in sums.iter_mut().zip(xb) {
        *sum = B::dot_scaled_add(v, *sum, q, &x.xq8[at..], &x.xq16[at..], scales);
    }
}

/// The blocks of a one-vector pass: their integer sums from the backend, `K` consecutive blocks
/// at a time (`Vector::q6k_int8_sums`, `q4k_int8_sums`), and their float terms (from the
/// backend where it has a faster exact way: `Vector::q6k_int8_terms`, `q4k_int8_terms`).
trait BlockRun {
    type Block;
    /// A block's integer sums: `S`, or Q4_K's `(S, M)`.
    type Sums: Copy;
    /// The sums of `K` consecutive blocks, `None` where the backend has no run of `K`.
    fn sums<V: Vector, const K: usize>(
        v: V,
        blocks: &[Self::Block; K],
        x: &PreparedRun<K>,
    ) -> Option<[Self::Sums; K]>;
    /// The sums of one block of each of four rows against the same block of the vector, `None`
    /// where the backend has no such sums.
    fn four_row_sums<V: Vector>(
        v: V,
        blocks: [&Self::Block; 4],
        xq8: &[i8; QK_K],
        bsums: &[i16; 16],
    ) -> Option<[Self::Sums; 4]>;
    /// The blocks' terms of their rows' sums (the canonical epilogue), each block's its own.
    fn terms<V: Vector, const K: usize>(
        v: V,
        blocks: [&Self::Block; K],
        dx: &[f32; K],
        sums: &[Self::Sums; K],
    ) -> [f32; K];
}

/// [`BlockRun`] of Q6_K blocks in layout `B`.
struct Q6Run<B>(PhantomData<B>);

impl<B: Q6Block> BlockRun for Q6Run<B> {
    type Block = B;
    type Sums = i32;
    #[inline(always)]
    fn sums<V: Vector, const K: usize>(
        v: V,
        blocks: &[B; K],
        x: &PreparedRun<K>,
    ) -> Option<[i32; K]> {
        B::int8_sums(blocks, v, x.xq8, x.bsums)
    }
    #[inline(always)]
    fn four_row_sums<V: Vector>(
        v: V,
        blocks: [&B; 4],
        xq8: &[i8; QK_K],
        bsums: &[i16; 16],
    ) -> Option<[i32; 4]> {
        B::int8_four_row_sums(blocks, v, xq8, bsums)
    }
    #[inline(always)]
    fn terms<V: Vector, const K: usize>(
        v: V,
        blocks: [&B; K],
        dx: &[f32; K],
        sums: &[i32; K],
    ) -> [f32; K] {
        let mut d = [[0u8; 2]; K];
        for (d, b) in d.iter_mut().zip(blocks) {
            *d = b.d();
        }
        if let Some(terms) = v.q6k_int8_terms(&d, dx, sums) {
            return terms;
        }
        let mut terms = [0.0f32; K];
        for ((term, &d), (&dx, &total)) in terms.iter_mut().zip(&d).zip(dx.iter().zip(sums)) {
            *term = q6k_term(v.f16_to_f32(d), dx, total);
        }
        terms
    }
}

/// [`BlockRun`] of Q4_K blocks.
struct Q4Run;

impl BlockRun for Q4Run {
    type Block = BlockQ4K;
    type Sums = (i32, i32);
    #[inline(always)]
    fn sums<V: Vector, const K: usize>(
        v: V,
        blocks: &[BlockQ4K; K],
        x: &PreparedRun<K>,
    ) -> Option<[(i32, i32); K]> {
        v.q4k_int8_sums(blocks, x.xq8, x.bsums)
    }
    #[inline(always)]
    fn four_row_sums<V: Vector>(
        v: V,
        blocks: [&BlockQ4K; 4],
        xq8: &[i8; QK_K],
        bsums: &[i16; 16],
    ) -> Option<[(i32, i32); 4]> {
        v.q4k_int8_four_row_sums(blocks, xq8, bsums)
    }
    #[inline(always)]
    fn terms<V: Vector, const K: usize>(
        v: V,
        blocks: [&BlockQ4K; K],
        dx: &[f32; K],
        sums: &[(i32, i32); K],
    ) -> [f32; K] {
        q4k_terms(v, blocks, dx, sums)
    }
}

/// The float terms of `K` Q4_K blocks (of one row or of several): the backend's
/// (`Vector::q4k_int8_terms`) or [`q4k_term`]'s, block by block.
#[inline(always)]
fn q4k_terms<V: Vector, const K: usize>(
    v: V,
    blocks: [&BlockQ4K; K],
    dx: &[f32; K],
    sums: &[(i32, i32); K],
) -> [f32; K] {
    if let Some(terms) = v.q4k_int8_terms(blocks, dx, sums) {
        return terms;
    }
    let mut terms = [0.0f32; K];
    for ((term, b), (&dx, &sums)) in terms.iter_mut().zip(blocks).zip(dx.iter().zip(sums)) {
        *term = q4k_term(v.f16_to_f32(b.d), v.f16_to_f32(b.dmin), dx, sums);
    }
    terms
}

/// [`BlockRun`] of Q6_K blocks in the interleaved layout, against a vector's permuted parts.
struct Q6InterleavedRun;

impl BlockRun for Q6InterleavedRun {
    type Block = BlockQ6KInterleaved;
    type Sums = i32;
    #[inline(always)]
    fn sums<V: Vector, const K: usize>(
        v: V,
        blocks: &[BlockQ6KInterleaved; K],
        x: &PreparedRun<K>,
    ) -> Option<[i32; K]> {
        v.q6k_interleaved_int8_sums(blocks, x.xq8, x.bsums)
    }
    #[inline(always)]
    fn four_row_sums<V: Vector>(
        v: V,
        blocks: [&BlockQ6KInterleaved; 4],
        xq8: &[i8; QK_K],
        bsums: &[i16; 16],
    ) -> Option<[i32; 4]> {
        v.q6k_interleaved_int8_four_row_sums(blocks, xq8, bsums)
    }
    #[inline(always)]
    fn terms<V: Vector, const K: usize>(
        v: V,
        blocks: [&BlockQ6KInterleaved; K],
        dx: &[f32; K],
        sums: &[i32; K],
    ) -> [f32; K] {
        // `d` sits where ggml's blocks have it, which is all the terms read.
        let ggml = blocks.map(bytemuck::cast_ref::<_, BlockQ6K>);
        Q6Run::<BlockQ6K>::terms(v, ggml, dx, sums)
    }
}

/// [`BlockRun`] of Q4_K blocks in the interleaved layout, against a vector's permuted parts.
struct Q4InterleavedRun;

impl BlockRun for Q4InterleavedRun {
    type Block = BlockQ4KInterleaved;
    type Sums = (i32, i32);
    #[inline(always)]
    fn sums<V: Vector, const K: usize>(
        v: V,
        blocks: &[BlockQ4KInterleaved; K],
        x: &PreparedRun<K>,
    ) -> Option<[(i32, i32); K]> {
        v.q4k_interleaved_int8_sums(blocks, x.xq8, x.bsums)
    }
    #[inline(always)]
    fn four_row_sums<V: Vector>(
        v: V,
        blocks: [&BlockQ4KInterleaved; 4],
        xq8: &[i8; QK_K],
        bsums: &[i16; 16],
    ) -> Option<[(i32, i32); 4]> {
        v.q4k_interleaved_int8_four_row_sums(blocks, xq8, bsums)
    }
    #[inline(always)]
    fn terms<V: Vector, const K: usize>(
        v: V,
        blocks: [&BlockQ4KInterleaved; K],
        dx: &[f32; K],
        sums: &[(i32, i32); K],
    ) -> [f32; K] {
        // `d` and `dmin` sit where ggml's blocks have them, which is all the terms read.
        q4k_terms(v, blocks.map(bytemuck::cast_ref::<_, BlockQ4K>), dx, sums)
    }
}

/// The first `K` blocks of a one-vector pass's `row` added to `acc` in block order, and `row`
/// and `x` moved past them; `false` (nothing changed) where the backend has no run of `K` or
/// fewer than `K` blocks are left.
#[inline(always)]
fn add_run<V: Vector, R: BlockRun, const K: usize>(
    v: V,
    row: &mut &[R::Block],
    x: &mut RunParts,
    acc: &mut f32,
) -> bool {
    // Written without closures: a closure is a function of its own, compiled without the
    // backend's target features.
    let (Some((blocks, rest)), Some((run, x_rest))) = (row.split_first_chunk(), x.split_run())
    else {
        return false;
    };
    let Some(sums) = R::sums::<V, K>(v, blocks, &run) else {
        return false;
    };
    // The terms side by side, then added in block order.
    for term in R::terms(v, blocks.each_ref(), run.dx, &sums) {
        *acc += term;
    }
    (*row, *x) = (rest, x_rest);
    true
}

/// A row against one vector from the backend's integer sums, in runs of four blocks but for
/// five left, which are three and two (a backend's run interleaves its blocks, which a lone
/// block cannot: rows of 14 blocks are 4 + 4 + 4 + 2, of 21 4 + 4 + 4 + 4 + 3 + 2), and shorter
/// runs where the backend has no longer ones; the float epilogue in block order: the same bits
/// as the chunk loop. The row's sum and the blocks done (0 where the backend has no runs).
#[inline(always)]
fn one_vector<V: Vector, R: BlockRun>(v: V, row: &[R::Block], x: &Prepared) -> (f32, usize) {
    let (mut acc, mut rest, mut x) = (0.0f32, row, x.run_parts());
    while !rest.is_empty()
        && (rest.len() != 5 && add_run::<V, R, 4>(v, &mut rest, &mut x, &mut acc)
            || add_run::<V, R, 3>(v, &mut rest, &mut x, &mut acc)
            || add_run::<V, R, 2>(v, &mut rest, &mut x, &mut acc)
            || add_run::<V, R, 1>(v, &mut rest, &mut x, &mut acc))
    {}
    (acc, row.len() - rest.len())
}

/// Four rows against one vector, a block of each at a time ([`BlockRun::four_row_sums`]),
/// their terms side by side ([`BlockRun::terms`]: the same terms as [`one_vector`]'s, each
/// added to its row's sum in block order, so the same bits); `None` where the backend has no
/// such sums.
#[inline(always)]
fn four_rows<V: Vector, R: BlockRun>(
    v: V,
    [a, b, c, d]: [&[R::Block]; 4],
    x: &Prepared,
) -> Option<[f32; 4]> {
    let mut acc = [0.0f32; 4];
    let blocks = a.iter().zip(b).zip(c.iter().zip(d));
    let parts = x.xq8.iter().zip(x.dx).zip(x.bsums);
    for (((a, b), (c, d)), ((xq8, &dx), bsums)) in blocks.zip(parts) {
        let sums = R::four_row_sums(v, [a, b, c, d], xq8, bsums)?;
        for (acc, term) in acc
            .iter_mut()
            .zip(R::terms(v, [a, b, c, d], &[dx; 4], &sums))
        {
            *acc += term;
        }
    }
    Some(acc)
}

/// The Q6_K kernel with 8-bit activations, for blocks in either layout.
#[derive(Clone, Copy)]
pub(super) struct Q6KQ8<B>(pub(super) PhantomData<B>);

impl<B: Q6Block + Copy> RowKernel for Q6KQ8<B> {
    const WIDEST_PASS: usize = 8;
    type Block = B;
    type View<'a> = Prepared<'a>;

    #[inline(always)]
    fn view(prepared: &[f32]) -> Prepared<'_> {
        parts(prepared)
    }

    #[inline(always)]
    fn dot<V: Vector, const N: usize>(self, v: V, row: &[B], prepared: [Prepared; N]) -> [f32; N] {
        let mut acc = [0.0f32; N];
        let mut done = 0;
        if N == 1 {
            (acc[0], done) = one_vector::<V, Q6Run<B>>(v, row, &prepared[0]);
        }
        for (i, b) in row.iter().enumerate().skip(done) {
            let d = v.f16_to_f32(b.d());
            let xb = prepared.map(|x| x.block(i));
            let sc: [i16; 16] = core::array::from_fn(|j| i16::from(b.scale(j)));
            let mut sums = [v.splat_u(0); N];
            if B::SHIFTS_BY_STEP {
                each_step!(V::unroll_int8_steps(N), s => {
                    for c in 0..16 / V::LANES {
                        add_q6_chunk(v, b, (s, c), &sc, &xb, &mut sums);
                    }
                });
            } else {
                for j in 0..QK_K / (4 * V::LANES) {
                    let step_chunk = (j / (16 / V::LANES), j % (16 / V::LANES));
                    add_q6_chunk(v, b, step_chunk, &sc, &xb, &mut sums);
                }
            }
            for ((a, sum), x) in acc.iter_mut().zip(sums).zip(&xb) {
                // The same integer either way: Σ sc·(q − 32)·xq.
                let total = if B::centered::<V>() {
                    v.sum_i32(sum)
                } else {
                    let (total, offset) = v.sum_and_dot16(sum, &sc, x.bsums);
                    total.wrapping_sub(32 * offset)
                };
                *a += q6k_term(d, x.dx, total);
            }
        }
        acc
    }

    #[inline(always)]
    fn dot_four_rows<V: Vector>(self, v: V, rows: [&[B]; 4], x: Prepared) -> Option<[f32; 4]> {
        four_rows::<V, Q6Run<B>>(v, rows, &x)
    }
}

/// A row against each of `N` vectors of the interleaved layout, one vector after the other as
/// [`one_vector`] does it (the row's blocks stay in the cache for the next vector); `None`
/// where the backend has no interleaved block sums.
#[inline(always)]
fn each_vector<V: Vector, R: BlockRun, const N: usize>(
    v: V,
    row: &[R::Block],
    prepared: &[PreparedInterleaved; N],
) -> Option<[f32; N]> {
    let mut out = [0.0f32; N];
    for (out, x) in out.iter_mut().zip(prepared) {
        let (acc, done) = one_vector::<V, R>(v, row, &x.permuted);
        if done != row.len() {
            return None;
        }
        *out = acc;
    }
    Some(out)
}

/// The Q6_K kernel with 8-bit activations for blocks in the interleaved layout: from the
/// backend's interleaved block sums where it has them, vector by vector (the same integers, so
/// the same bits), otherwise by the ggml layout's kernel on the row converted back.
#[derive(Clone, Copy)]
pub(super) struct Q6KQ8Interleaved;

impl RowKernel for Q6KQ8Interleaved {
    const WIDEST_PASS: usize = 8;
    type Block = BlockQ6KInterleaved;
    type View<'a> = PreparedInterleaved<'a>;

    #[inline(always)]
    fn view(prepared: &[f32]) -> PreparedInterleaved<'_> {
        parts_interleaved(prepared)
    }

    #[inline(always)]
    fn dot<V: Vector, const N: usize>(
        self,
        v: V,
        row: &[BlockQ6KInterleaved],
        prepared: [PreparedInterleaved; N],
    ) -> [f32; N] {
        if let Some(out) = each_vector::<V, Q6InterleavedRun, N>(v, row, &prepared) {
            return out;
        }
        let (ggml, n) = super::ggml_row::<_, BlockQ6K>(row);
        Q6KQ8(PhantomData).dot(v, &ggml[..n], prepared.map(|x| x.plain))
    }

    #[inline(always)]
    fn dot_four_rows<V: Vector>(
        self,
        v: V,
        rows: [&[BlockQ6KInterleaved]; 4],
        x: PreparedInterleaved,
    ) -> Option<[f32; 4]> {
        four_rows::<V, Q6InterleavedRun>(v, rows, &x.permuted)
    }
}

/// The Q4_K kernel with 8-bit activations for blocks in the interleaved layout, as
/// [`Q6KQ8Interleaved`].
#[derive(Clone, Copy)]
pub(super) struct Q4KQ8Interleaved;

impl RowKernel for Q4KQ8Interleaved {
    const WIDEST_PASS: usize = 8;
    type Block = BlockQ4KInterleaved;
    type View<'a> = PreparedInterleaved<'a>;

    #[inline(always)]
    fn view(prepared: &[f32]) -> PreparedInterleaved<'_> {
        parts_interleaved(prepared)
    }

    #[inline(always)]
    fn dot<V: Vector, const N: usize>(
        self,
        v: V,
        row: &[BlockQ4KInterleaved],
        prepared: [PreparedInterleaved; N],
    ) -> [f32; N] {
        if let Some(out) = each_vector::<V, Q4InterleavedRun, N>(v, row, &prepared) {
            return out;
        }
        let (ggml, n) = super::ggml_row::<_, BlockQ4K>(row);
        Q4KQ8.dot(v, &ggml[..n], prepared.map(|x| x.plain))
    }

    #[inline(always)]
    fn dot_four_rows<V: Vector>(
        self,
        v: V,
        rows: [&[BlockQ4KInterleaved]; 4],
        x: PreparedInterleaved,
    ) -> Option<[f32; 4]> {
        four_rows::<V, Q4InterleavedRun>(v, rows, &x.permuted)
    }
}

/// The Q4_K kernel with 8-bit activations.
#[derive(Clone, Copy)]
pub(super) struct Q4KQ8;

impl RowKernel for Q4KQ8 {
    const WIDEST_PASS: usize = 8;
    type Block = BlockQ4K;
    type View<'a> = Prepared<'a>;

    #[inline(always)]
    fn view(prepared: &[f32]) -> Prepared<'_> {
        parts(prepared)
    }

    #[inline(always)]
    fn dot<V: Vector, const N: usize>(
        self,
        v: V,
        row: &[BlockQ4K],
        prepared: [Prepared; N],
    ) -> [f32; N] {
        let mut acc = [0.0f32; N];
        let mut done = 0;
        if N == 1 {
            (acc[0], done) = one_vector::<V, Q4Run>(v, row, &prepared[0]);
        }
        for (i, b) in row.iter().enumerate().skip(done) {
            let (d, dmin) = (v.f16_to_f32(b.d), v.f16_to_f32(b.dmin));
            let xb = prepared.map(|x| x.block(i));
            // Per 16-column group: the sub-block's scale and min (each used for two groups).
            let (mut sc, mut m) = ([0i16; 16], [0i16; 16]);
            for s in 0..8 {
                let (scale, min) = b.scale_min(s);
                (sc[2 * s], sc[2 * s + 1]) = (i16::from(scale), i16::from(scale));
                (m[2 * s], m[2 * s + 1]) = (i16::from(min), i16::from(min));
            }
            let mut sums = [v.splat_u(0); N];
            each_step!(V::unroll_int8_steps(N), s => {
                for c in 0..16 / V::LANES {
                    let q = v.and(q4k_chunk(v, b, s, c), v.splat_u(0x0F0F_0F0F));
                    let at = 64 * s + 4 * V::LANES * c;
                    let scales = &sc[4 * s + c * V::LANES / 4..];
                    for (sum, x) in sums.iter_mut().zip(&xb) {
                        *sum = v.dot_scaled_add(*sum, q, &x.xq8[at..], &x.xq16[at..], scales);
                    }
                }
            });
            for ((a, sum), x) in acc.iter_mut().zip(sums).zip(&xb) {
                *a += q4k_term(d, dmin, x.dx, v.sum_and_dot16(sum, &m, x.bsums));
            }
        }
        acc
    }

    #[inline(always)]
    fn dot_four_rows<V: Vector>(
        self,
        v: V,
        rows: [&[BlockQ4K]; 4],
        x: Prepared,
    ) -> Option<[f32; 4]> {
        four_rows::<V, Q4Run>(v, rows, &x)
    }
}
