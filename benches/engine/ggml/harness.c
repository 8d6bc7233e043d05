// llama.cpp's ggml wasm simd128 kernels as a standalone wasm module for the engine benchmark
// (scripts/build-ggml-wasm.sh links it with ggml's src/ggml-cpu/arch/wasm/quants.c). A mat-vec
// runs as ggml's mul_mat runs one vector on one thread: x quantized to Q8_K once
// (quantize_row_q8_K), then one ggml_vec_dot_q{6,4}_K_q8_K per weight row. The harness
// (benches/engine/harness.mjs) copies the engine module's weight bytes and vector into this
// module's memory; ggml's block layout is kquant's, so the bytes are used as they are.
//
// Exports, all plain numbers: setup(rows, cols, bytes) allocates the buffers (1, or 0 for a
// shape or byte count that is not whole Q6_K or Q4_K blocks, or when memory runs out);
// weights_ptr(), x_ptr(), out_ptr() say where they are; run() does one mat-vec and answers its
// first result.
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define GGML_COMMON_DECL_C
#include "ggml-common.h"
#include "ggml-impl.h"
#include "quants.h" // ggml-cpu's: quantize_row_q8_K, ggml_vec_dot_q{6,4}_K_q8_K

#define EXPORT(name) __attribute__((export_name(#name)))

// What ggml's wasm quantization file needs from the rest of ggml: the half-precision table that
// ggml_cpu_init() fills (its fp16 conversion on wasm is a lookup in it).
float ggml_table_f32_f16[1 << 16];

typedef void (*vec_dot_t)(int, float * GGML_RESTRICT, size_t, const void * GGML_RESTRICT, size_t,
                          const void * GGML_RESTRICT, size_t, int);

// Bytes of one 256-weight block: Q6_K (ql, qh, scales, d) and Q4_K (d, dmin, scales, qs).
enum { Q6_K_BYTES = 210, Q4_K_BYTES = 144 };

static struct {
    int rows, cols;
    size_t row_bytes;
    vec_dot_t dot;
    uint8_t * weights;
    float * x;
    block_q8_K * q8;
    float * out;
} m;

EXPORT(setup) int setup(int rows, int cols, size_t bytes) {
    if (rows <= 0 || cols <= 0 || cols % QK_K != 0) return 0;
    size_t blocks = (size_t) rows * (size_t) (cols / QK_K);
    vec_dot_t dot;
    if (bytes == blocks * Q6_K_BYTES) dot = ggml_vec_dot_q6_K_q8_K;
    else if (bytes == blocks * Q4_K_BYTES) dot = ggml_vec_dot_q4_K_q8_K;
    else return 0;
    for (int i = 0; i < (1 << 16); i++) {
        ggml_table_f32_f16[i] = GGML_COMPUTE_FP16_TO_FP32((ggml_fp16_t) i);
    }
    free(m.weights); free(m.x); free(m.q8); free(m.out);
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = bytes / (size_t) rows;
    m.dot = dot;
    m.weights = malloc(bytes);
    m.x = malloc((size_t) cols * sizeof(float));
    m.q8 = malloc((size_t) (cols / QK_K) * sizeof(block_q8_K));
    m.out = malloc((size_t) rows * sizeof(float));
    return m.weights && m.x && m.q8 && m.out;
}

EXPORT(weights_ptr) uint8_t * weights_ptr(void) { return m.weights; }
EXPORT(x_ptr) float * x_ptr(void) { return m.x; }
EXPORT(out_ptr) float * out_ptr(void) { return m.out; }

EXPORT(run) float run(void) {
    if (!m.out) return __builtin_nanf("");
    quantize_row_q8_K(m.x, m.q8, m.cols);
    for (int r = 0; r < m.rows; r++) {
        m.dot(m.cols, &m.out[r], 0, m.weights + (size_t) r * m.row_bytes, 0, m.q8, 0, 1);
    }
    return m.out[0];
}
