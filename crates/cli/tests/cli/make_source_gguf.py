# A GGUF with a 512 x 512 lm-head stored as TYPE, written by the PyPI gguf package, and the
# package's dequantization of it (float32) for tests/cli/requantize.rs.
# Usage: python3 make_source_gguf.py OUT.gguf DEQ.f32 TYPE   (f32 f16 bf16 q8_0 q5_k iq2_xxs)
import sys, numpy as np, gguf
path, out_deq, tname = sys.argv[1], sys.argv[2], sys.argv[3]
rows, cols = 512, 512
rng = np.random.default_rng(7)
W = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
Q = gguf.GGMLQuantizationType
w = gguf.GGUFWriter(path, "llama")
w.add_embedding_length(cols)
if tname == "f32":
    raw, qt = W, Q.F32
    w.add_tensor("output.weight", W)
elif tname == "f16":
    raw, qt = W.astype(np.float16), Q.F16
    w.add_tensor("output.weight", raw)
elif tname in ("bf16", "q8_0"):
    qt = {"bf16": Q.BF16, "q8_0": Q.Q8_0}[tname]
    raw = gguf.quants.quantize(W, qt)
    w.add_tensor("output.weight", raw, raw_dtype=qt)
elif tname in ("q5_k", "iq2_xxs"):
    qt = {"q5_k": Q.Q5_K, "iq2_xxs": Q.IQ2_XXS}[tname]
    size = {"q5_k": 176, "iq2_xxs": 66}[tname]
    raw = rng.integers(0, 256, (rows, cols // 256 * size), dtype=np.uint8)
    d = np.frombuffer(np.float16(0.004).tobytes(), dtype=np.uint8)
    for b in range(cols // 256):
        raw[:, b * size:b * size + 2] = d
        if tname == "q5_k":
            raw[:, b * size + 2:b * size + 4] = np.frombuffer(np.float16(0.002).tobytes(), dtype=np.uint8)
    w.add_tensor("output.weight", raw, raw_dtype=qt)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
if tname != "iq2_xxs":
    deq = gguf.quants.dequantize(raw, qt) if tname not in ("f32", "f16") else raw.astype(np.float32)
    np.asarray(deq, dtype=np.float32).tofile(out_deq)
