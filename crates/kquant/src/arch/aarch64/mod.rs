//! aarch64 backend: Advanced SIMD (NEON), part of every aarch64 CPU.

pub(crate) mod neon;

/// FPCR's flush-to-zero flag (bit 24).
const FPCR_FZ: u64 = 1 << 24;

/// Whether this thread's floating-point unit flushes subnormals (FPCR.FZ set).
pub(crate) fn flushes_subnormals() -> bool {
    let fpcr: u64;
    // SAFETY: `mrs` reads FPCR into a register; no memory, stack or flags are touched.
    unsafe {
        core::arch::asm!(
            "mrs {r}, fpcr",
            r = out(reg) fpcr,
            options(nomem, nostack, preserves_flags)
        );
    }
    fpcr & FPCR_FZ != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Backend, Error, QMatrix, QuantType};

    #[test]
    fn a_flushing_float_environment_is_refused() {
        let bytes = [0u8; 210];
        let m = QMatrix::new(QuantType::Q6K, &bytes, 1, 256).unwrap();
        let (x, mut out, mut scratch) = ([1.0f32; 256], [0.0f32; 1], [0.0f32; 512]);
        let scratch = &mut scratch[..m.scratch_len()];
        assert!(!flushes_subnormals());
        let saved: u64;
        // SAFETY: `mrs`/`msr` read and write FPCR through registers only; the value written is
        // the current one with FZ added, and the original is restored below.
        unsafe {
            core::arch::asm!("mrs {r}, fpcr", r = out(reg) saved, options(nomem, nostack));
            core::arch::asm!("msr fpcr, {r}", r = in(reg) saved | FPCR_FZ, options(nomem, nostack));
        }
        let flushing = flushes_subnormals();
        let refused = m.mat_vec_with(Backend::Scalar, &x, &mut out, scratch);
        // SAFETY: as above, restoring the value read first.
        unsafe {
            core::arch::asm!("msr fpcr, {r}", r = in(reg) saved, options(nomem, nostack));
        }
        assert!(flushing);
        assert_eq!(refused, Err(Error::SubnormalsFlushed));
        assert!(!flushes_subnormals(), "FPCR restored");
        assert_eq!(
            m.mat_vec_with(Backend::Scalar, &x, &mut out, scratch),
            Ok(())
        );
    }
}
