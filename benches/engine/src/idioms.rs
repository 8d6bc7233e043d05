//! The simd128 operations and idioms the kernels are made of, each timed on its own.
//!
//! Every idiom streams a 16 KiB buffer (it stays in L1, so memory never bounds it) as 1024
//! `v128` values, applies one operation chain to each and folds the results into four
//! independent accumulators (so the loop measures throughput, not one long dependency chain).
//! The checksum the caller gets back keeps the engine from dropping the work. `ops` is the
//! number of the named operation per buffer pass: the harness divides by it to report
//! nanoseconds per operation, and by the `load` idiom's time to see what the operation adds.
//!
//! The same module runs in Node and in workerd, so a ratio between the two engines for one
//! idiom points at a lowering that differs (V8 11.3 against 14.x).

use core::arch::wasm32::*;

/// `v128` values in the buffer: 16 KiB.
pub const VECTORS: usize = 1024;

/// One idiom: its name, the count of its operation per pass, and the pass.
pub struct Idiom {
    pub name: &'static str,
    pub ops: u32,
    pub pass: fn(&[v128], &[u8]) -> v128,
}

/// Runs `f` on every vector and folds the results into four accumulators with `add`.
#[inline(always)]
fn fold_by(
    buf: &[v128],
    add: impl Fn(v128, v128) -> v128,
    f: impl Fn(v128, usize) -> v128,
) -> v128 {
    let mut acc = [i32x4_splat(0); 4]; // also f32 +0.0 in every lane
    for (i, chunk) in buf.chunks_exact(4).enumerate() {
        for (a, (k, &v)) in acc.iter_mut().zip(chunk.iter().enumerate()) {
            *a = add(*a, f(v, 4 * i + k));
        }
    }
    add(add(acc[0], acc[1]), add(acc[2], acc[3]))
}

/// Integer idioms: lane-wise i32 additions.
#[inline(always)]
fn fold(buf: &[v128], f: impl Fn(v128, usize) -> v128) -> v128 {
    fold_by(buf, |a, b| i32x4_add(a, b), f)
}

/// Float idioms: f32 additions.
#[inline(always)]
fn fold_f32(buf: &[v128], f: impl Fn(v128, usize) -> v128) -> v128 {
    fold_by(buf, |a, b| f32x4_add(a, b), f)
}

fn load(buf: &[v128], _: &[u8]) -> v128 {
    fold(buf, |v, _| v)
}

fn load_unaligned(buf: &[v128], bytes: &[u8]) -> v128 {
    // The kernels load 16 bytes at offsets that are multiples of 4 inside a block.
    fold(buf, |_, i| {
        let o = (16 * i + 4 * (i % 3)).min(bytes.len() - 16);
        bytemuck::pod_read_unaligned::<v128>(&bytes[o..o + 16])
    })
}

fn shift_mask(buf: &[v128], _: &[u8]) -> v128 {
    // Q6_K's unpacking: low nibbles, two high bits, combined.
    fold(buf, |v, _| {
        let lo = v128_and(u32x4_shr(v, 4), u32x4_splat(0x0F0F_0F0F));
        let hi = v128_and(u32x4_shr(v, 2), u32x4_splat(0x0303_0303));
        v128_or(lo, i32x4_shl(hi, 4))
    })
}

fn swizzle(buf: &[v128], _: &[u8]) -> v128 {
    let table = u8x16(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    fold(buf, |v, _| {
        i8x16_swizzle(table, v128_and(v, u8x16_splat(0x0F)))
    })
}

fn shuffle_const(buf: &[v128], _: &[u8]) -> v128 {
    // Byte k of each u32 lane to the low byte (the magic-number form's first step).
    fold(buf, |v, _| {
        i8x16_shuffle::<1, 16, 16, 16, 5, 16, 16, 16, 9, 16, 16, 16, 13, 16, 16, 16>(
            v,
            u8x16_splat(0),
        )
    })
}

fn extend_u8(buf: &[v128], _: &[u8]) -> v128 {
    fold(buf, |v, _| {
        i16x8_add(u16x8_extend_low_u8x16(v), u16x8_extend_high_u8x16(v))
    })
}

fn dot_i16(buf: &[v128], _: &[u8]) -> v128 {
    let x = i16x8(3, -7, 11, 13, -17, 19, 23, -29);
    fold(buf, |v, _| i32x4_dot_i16x8(v, x))
}

fn extmul_i8(buf: &[v128], _: &[u8]) -> v128 {
    let x = i8x16(
        3, -7, 11, 13, -17, 19, 23, -29, 3, -7, 11, 13, -17, 19, 23, -29,
    );
    fold(buf, |v, _| {
        let p = i16x8_add(i16x8_extmul_low_i8x16(v, x), i16x8_extmul_high_i8x16(v, x));
        i32x4_extadd_pairwise_i16x8(p)
    })
}

fn mul_i32(buf: &[v128], _: &[u8]) -> v128 {
    let s = i32x4_splat(37);
    fold(buf, |v, _| i32x4_mul(v, s))
}

fn convert(buf: &[v128], _: &[u8]) -> v128 {
    fold_f32(buf, |v, _| {
        f32x4_convert_i32x4(v128_and(v, i32x4_splat(0xFF)))
    })
}

fn magic_number(buf: &[v128], _: &[u8]) -> v128 {
    // The byte as the f32 2²³ + q, then one exact subtraction: a conversion without cvtdq2ps.
    let magic = f32x4_splat(-8_388_640.0); // −(2²³ + 32)
    fold_f32(buf, |v, _| {
        let bits = v128_or(v128_and(v, i32x4_splat(0xFF)), i32x4_splat(0x4B00_0000));
        f32x4_add(bits, magic)
    })
}

fn sign_extend(buf: &[v128], _: &[u8]) -> v128 {
    // Byte 1 of each lane as a 6-bit two's complement number, by a shift pair.
    fold_f32(buf, |v, _| {
        f32x4_convert_i32x4(i32x4_shr(i32x4_shl(v, 18), 26))
    })
}

fn mul_add_f32(buf: &[v128], _: &[u8]) -> v128 {
    let s = f32x4_splat(0.5);
    fold_f32(buf, |v, _| {
        f32x4_mul(v128_and(v, i32x4_splat(0x3F00_FFFF)), s)
    })
}

fn splat_f32(buf: &[v128], bytes: &[u8]) -> v128 {
    // A scalar f32 read from memory and splat (the kernels' per-group scale).
    fold_f32(buf, |v, i| {
        let scale = f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap_or_default());
        f32x4_mul(v128_and(v, i32x4_splat(0x3F00_FFFF)), f32x4_splat(scale))
    })
}

fn reduce_lanes(buf: &[v128], _: &[u8]) -> v128 {
    // The int8 epilogue: i32 lanes summed across by shuffles, one lane extracted.
    fold(buf, |v, _| {
        let pairs = i32x4_add(v, i32x4_shuffle::<2, 3, 0, 1>(v, v));
        let all = i32x4_add(pairs, i32x4_shuffle::<1, 0, 3, 2>(pairs, pairs));
        i32x4_splat(i32x4_extract_lane::<0>(all))
    })
}

/// Every idiom, in the order the harness reports them.
pub const IDIOMS: [Idiom; 15] = [
    Idiom {
        name: "v128.load (baseline)",
        ops: 1024,
        pass: load,
    },
    Idiom {
        name: "v128.load at +4·k bytes (with a Rust slice check)",
        ops: 1024,
        pass: load_unaligned,
    },
    Idiom {
        name: "shifts, masks, or (Q6_K unpack)",
        ops: 1024,
        pass: shift_mask,
    },
    Idiom {
        name: "i8x16.swizzle",
        ops: 1024,
        pass: swizzle,
    },
    Idiom {
        name: "i8x16.shuffle (constant)",
        ops: 1024,
        pass: shuffle_const,
    },
    Idiom {
        name: "u16x8.extend_low/high_u8x16",
        ops: 2048,
        pass: extend_u8,
    },
    Idiom {
        name: "i32x4.dot_i16x8_s",
        ops: 1024,
        pass: dot_i16,
    },
    Idiom {
        name: "i16x8.extmul_low/high_i8x16",
        ops: 2048,
        pass: extmul_i8,
    },
    Idiom {
        name: "i32x4.mul",
        ops: 1024,
        pass: mul_i32,
    },
    Idiom {
        name: "f32x4.convert_i32x4_s",
        ops: 1024,
        pass: convert,
    },
    Idiom {
        name: "2²³ magic number (or + f32x4.add)",
        ops: 1024,
        pass: magic_number,
    },
    Idiom {
        name: "shl + shr_s + convert (sign extend)",
        ops: 1024,
        pass: sign_extend,
    },
    Idiom {
        name: "f32x4.mul + f32x4.add",
        ops: 1024,
        pass: mul_add_f32,
    },
    Idiom {
        name: "f32 load + f32x4.splat + mul",
        ops: 1024,
        pass: splat_f32,
    },
    Idiom {
        name: "lane reduction + extract_lane",
        ops: 1024,
        pass: reduce_lanes,
    },
];
