"""halcyon's Python module on the CPU device with NumPy arrays (what CI has: Debian 12 has no
PyTorch): operators and the MoE layer on arrays handed over through DLPack without a copy,
export of halcyon memory to NumPy, and the errors for arrays it cannot take.

    HALCYON_LIBRARY=build/lib/libhalcyon_runtime.so python3 python/tests/test_cpu.py
"""
import os
import sys

try:
    import numpy as np
except ImportError:  # CTest reports 77 as skipped; scripts/setup-debian.sh installs python3-numpy
    print("skipped: this python3 has no NumPy (Debian: python3-numpy)")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import halcyon  # noqa: E402
from checks import check, expect_error, finish  # noqa: E402
from moe_numpy import bf16_to_f32, f32_to_bf16, moe_layer, rel_error  # noqa: E402

rng = np.random.default_rng(21)

# vector_add in place: c is written through the imported buffer (no copy back exists).
a = rng.standard_normal(4099).astype(np.float32)
b = rng.standard_normal(4099).astype(np.float32)
c = np.zeros_like(a)
halcyon.run("vector_add", a=a, b=b, c=c)
check(np.array_equal(c, a + b), "vector_add on NumPy arrays, written in place")
check(halcyon.device_address(c) == c.ctypes.data, "zero copy: halcyon's buffer for c is c's own memory")

# A parameterised operator: row_softmax.
x = rng.standard_normal((7, 33)).astype(np.float32)
y = np.zeros_like(x)
halcyon.run("row_softmax", x=x, y=y)
ref = np.exp(x - x.max(1, keepdims=True))
ref /= ref.sum(1, keepdims=True)
check(np.allclose(y, ref, rtol=1e-5, atol=1e-7), "row_softmax")

# The MoE layer on bf16 bits (NumPy has no bfloat16: halcyon.bf16 marks uint16 arrays).
T, H, I, E, K, G, TG = 24, 128, 32, 16, 4, 4, 2
xs = f32_to_bf16(rng.uniform(-1, 1, (T, H)))
wr = f32_to_bf16(rng.uniform(-0.05, 0.05, (H, E)))
wgu = f32_to_bf16(rng.uniform(-0.05, 0.05, (E, H, 2 * I)))
wd = f32_to_bf16(rng.uniform(-0.05, 0.05, (E, I, H)))
bias = rng.uniform(-0.02, 0.02, E).astype(np.float32)
out = halcyon.moe_layer(halcyon.bf16(xs), halcyon.bf16(wr), halcyon.bf16(wgu), halcyon.bf16(wd), bias=bias,
                        topk=K, n_groups=G, topk_groups=TG)
want = moe_layer(*(bf16_to_f32(v) for v in (xs, wr, wgu, wd)), bias, K, G, TG)
err = rel_error(bf16_to_f32(out.array), want)
check(err < 2e-2, f"moe_layer against NumPy: relative error {err:.2e}")

# Export: halcyon memory written by an operator (exported and imported back: the same buffer)
# and viewed by NumPy without a copy (NumPy 1.x marks DLPack views read-only).
e = halcyon.empty((4099,), "f32")
halcyon.run("vector_add", a=a, b=b, c=e)
v1, v2 = np.from_dlpack(e), np.from_dlpack(e)
check(np.array_equal(v1, a + b), "halcyon.empty written by vector_add, read by NumPy")
check(v1.ctypes.data == v2.ctypes.data, "two NumPy views of one halcyon buffer share its memory")
del v1, v2, e

# What it refuses, naming the tensor and the value.
expect_error(lambda: halcyon.run("vector_add", a=np.ones((8, 8), np.float32)[:, ::2].copy().T, b=a[:16], c=c[:16]),
             "'a': it is not contiguous", "a transposed (non-contiguous) array")
expect_error(lambda: halcyon.run("vector_add", a=a.astype(np.float16), b=b, c=c), "f16", "an f16 input to an f32 op")
expect_error(lambda: halcyon.run("vector_add", a=a, b=b, c=c, device="cuda:0"),
             "tensor 'a' is on cpu:0, the call's device is cuda:0", "a tensor of another device")
expect_error(lambda: halcyon.run("vector_add", a=a.astype(np.uint16), b=b, c=c),
             "has no halcyon dtype", "a dtype halcyon has not")
expect_error(lambda: halcyon.moe_layer(halcyon.bf16(xs), halcyon.bf16(wr), halcyon.bf16(np.ascontiguousarray(wgu[:, :, :-2])),
                                       halcyon.bf16(wd), topk=K, n_groups=G, topk_groups=TG),
             "'w_down' has shape", "moe_layer weights of mismatched shapes")
expect_error(lambda: halcyon.run("vector_add", a=[1.0], b=b, c=c), "'a' is a list: a tensor needs __dlpack__", "a Python list")

finish()
