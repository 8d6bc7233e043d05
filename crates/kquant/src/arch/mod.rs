//! Backends: which exist, which this machine can run, and dispatch of a job to one of them.
//!
//! The layout follows the `memchr` crate: [`generic`] holds the algorithms over the
//! [`generic::Vector`] trait, each architecture module implements that trait with its intrinsics
//! and exposes one entry point compiled with its target features. `unsafe` lives only in the
//! architecture modules.

pub(crate) mod generic;
mod scalar;

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm32;
#[cfg(target_arch = "x86_64")]
mod x86_64;

use core::fmt;

use generic::Job;

/// A kernel implementation. All of them compute the same bits; they differ only in speed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Portable Rust over 4-lane arrays: the reference.
    Scalar,
    /// x86_64 SSE2, 4 lanes (every x86_64 CPU has it).
    Sse2,
    /// x86_64 AVX2 (+ F16C), 8 lanes, chosen at run time (with the `std` feature) or at
    /// compile time.
    Avx2,
    /// x86_64 AVX-512 F + BW + VL (+ F16C), 16 lanes, chosen like [`Backend::Avx2`].
    Avx512,
    /// [`Backend::Avx512`] whose int8 kernels accumulate with AVX-512 VNNI's `vpdpwssd`; its
    /// exact kernels are AVX-512's.
    Avx512Vnni,
    /// aarch64 Advanced SIMD, 4 lanes.
    Neon,
    /// [`Backend::Neon`] whose int8 kernels use the dot-product extension's `sdot` (FEAT_DotProd,
    /// detected at run time); its exact kernels are NEON's.
    NeonDot,
    /// WebAssembly simd128, 4 lanes; compiled in with `-C target-feature=+simd128`.
    Simd128,
    /// simd128 whose int8 kernels use relaxed SIMD's 8-bit dot product where its result is
    /// defined (`wasm32::simd128`'s docs); compiled in with the crate feature `relaxed-simd`.
    /// Its exact kernels are [`Backend::Simd128`]'s.
    Simd128Relaxed,
}

impl Backend {
    /// Every backend, fastest last.
    pub const ALL: [Backend; 9] = [
        Backend::Scalar,
        Backend::Sse2,
        Backend::Neon,
        Backend::NeonDot,
        Backend::Simd128,
        Backend::Simd128Relaxed,
        Backend::Avx2,
        Backend::Avx512,
        Backend::Avx512Vnni,
    ];

    /// Its lower-case name, as used by benchmarks and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Scalar => "scalar",
            Backend::Sse2 => "sse2",
            Backend::Avx2 => "avx2",
            Backend::Avx512 => "avx512",
            Backend::Avx512Vnni => "avx512-vnni",
            Backend::Neon => "neon",
            Backend::NeonDot => "neon-dotprod",
            Backend::Simd128 => "simd128",
            Backend::Simd128Relaxed => "simd128-relaxed",
        }
    }

    /// Looks a backend up by [`Backend::name`].
    pub fn from_name(name: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.name() == name)
    }

    /// Whether this build, on this CPU, can run the backend.
    pub fn is_available(self) -> bool {
        match self {
            Backend::Scalar => true,
            Backend::Sse2 => cfg!(target_arch = "x86_64"),
            Backend::Avx2 => avx2_detected(),
            Backend::Avx512 => avx512_detected(),
            Backend::Avx512Vnni => avx512_detected() && vnni_detected(),
            Backend::Neon => cfg!(target_arch = "aarch64"),
            Backend::NeonDot => dotprod_detected(),
            Backend::Simd128 => cfg!(all(target_arch = "wasm32", target_feature = "simd128")),
            Backend::Simd128Relaxed => cfg!(all(
                target_arch = "wasm32",
                target_feature = "simd128",
                feature = "relaxed-simd"
            )),
        }
    }

    /// The backends available here, fastest last.
    pub fn available() -> impl Iterator<Item = Backend> {
        Backend::ALL.into_iter().filter(|b| b.is_available())
    }

    /// The fastest available backend: what the default entry points use.
    pub fn best() -> Backend {
        Backend::available().last().unwrap_or(Backend::Scalar)
    }

    /// Runs `job`; the caller has checked [`Backend::is_available`].
    pub(crate) fn run(self, job: Job<'_>) {
        match self {
            #[cfg(target_arch = "x86_64")]
            Backend::Sse2 => x86_64::sse2::run(job),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => x86_64::avx2::run(job),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512 => x86_64::avx512::run(job),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512Vnni => x86_64::avx512::run_vnni(job),
            #[cfg(target_arch = "aarch64")]
            Backend::Neon => aarch64::neon::run(job),
            #[cfg(target_arch = "aarch64")]
            Backend::NeonDot => aarch64::neon::run_dot(job),
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Backend::Simd128 => wasm32::simd128::run(job),
            #[cfg(all(
                target_arch = "wasm32",
                target_feature = "simd128",
                feature = "relaxed-simd"
            ))]
            Backend::Simd128Relaxed => wasm32::simd128::run_relaxed(job),
            _ => scalar::run(job),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether this thread's floating-point environment flushes subnormals to zero (x86 MXCSR
/// FTZ/DAZ, aarch64 FPCR.FZ). The canonical order keeps subnormals; wasm has no such mode.
pub(crate) fn flushes_subnormals() -> bool {
    #[cfg(target_arch = "x86_64")]
    return x86_64::flushes_subnormals();
    #[cfg(target_arch = "aarch64")]
    return aarch64::flushes_subnormals();
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    false
}

#[cfg(all(target_arch = "x86_64", feature = "std"))]
fn avx2_detected() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c")
}

#[cfg(not(all(target_arch = "x86_64", feature = "std")))]
fn avx2_detected() -> bool {
    cfg!(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "f16c"
    ))
}

#[cfg(all(target_arch = "x86_64", feature = "std"))]
fn avx512_detected() -> bool {
    std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512vl")
        && std::is_x86_feature_detected!("f16c")
}

#[cfg(not(all(target_arch = "x86_64", feature = "std")))]
fn avx512_detected() -> bool {
    cfg!(all(
        target_arch = "x86_64",
        target_feature = "avx512f",
        target_feature = "avx512bw",
        target_feature = "avx512vl",
        target_feature = "f16c"
    ))
}

#[cfg(all(target_arch = "x86_64", feature = "std"))]
fn vnni_detected() -> bool {
    std::is_x86_feature_detected!("avx512vnni")
}

#[cfg(not(all(target_arch = "x86_64", feature = "std")))]
fn vnni_detected() -> bool {
    cfg!(all(target_arch = "x86_64", target_feature = "avx512vnni"))
}

#[cfg(all(target_arch = "aarch64", feature = "std"))]
fn dotprod_detected() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}

#[cfg(not(all(target_arch = "aarch64", feature = "std")))]
fn dotprod_detected() -> bool {
    cfg!(all(target_arch = "aarch64", target_feature = "dotprod"))
}
