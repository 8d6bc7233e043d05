//! `KQUANT_PERTURB=…` → `--cfg kquant_perturb="…"`: the must-fail builds of scripts/must-fail.sh
//! (crates/perturb). "order": the final reduction of every backend but scalar; "lane": two lanes
//! swapped in one backend (AVX2, simd128); "f16": the shared f16 conversion one ulp off;
//! "q4k_min": each Q4_K scale paired with its neighbour's min; "ties": the 8-bit mode rounds
//! activation ties away from zero instead of to even; "signed_i7": the relaxed int8 kernels with
//! the signed activations in relaxed SIMD's 7-bit operand.
fn main() {
    cobordism_perturb::cfg_from_env(
        "KQUANT_PERTURB",
        "kquant_perturb",
        &["order", "lane", "f16", "q4k_min", "ties", "signed_i7"],
    );
}
