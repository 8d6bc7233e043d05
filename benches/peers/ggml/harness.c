// What ggml's CPU quantization kernels need from the rest of ggml to link alone, for the peer
// benchmark (benches/peers/src/ggml.rs): the conversion tables ggml_cpu_init() fills, and the
// few library functions the quantization files refer to. Only the Q8_K quantizer and the
// Q6_K / Q4_K dot products are called.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "ggml-impl.h"

float ggml_table_f32_f16[1 << 16];
float ggml_table_f32_e8m0_half[1 << 8];
float ggml_table_f32_ue4m3[1 << 8];

// Fills the half-precision table as ggml_cpu_init() does (the other two tables serve formats
// the benchmark does not run).
void cobordism_ggml_init(void) {
    for (int i = 0; i < (1 << 16); i++) {
        ggml_table_f32_f16[i] = GGML_COMPUTE_FP16_TO_FP32((ggml_fp16_t) i);
    }
}

void ggml_abort(const char * file, int line, const char * fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "ggml_abort at %s:%d: ", file, line);
    vfprintf(stderr, fmt, args);
    va_end(args);
    abort();
}

// Reached only by quantizers the benchmark does not call.
size_t ggml_row_size(enum ggml_type type, int64_t ne) {
    (void) type; (void) ne;
    abort();
}

size_t ggml_type_size(enum ggml_type type) {
    (void) type;
    abort();
}

const char * ggml_type_name(enum ggml_type type) {
    (void) type;
    return "?";
}
