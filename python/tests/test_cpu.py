"""halcyon's Python module on the CPU device with NumPy arrays (what CI has: Debian 12 has no
PyTorch): operators and the MoE layer on arrays handed over through DLPack without a copy,
export of halcyon memory to NumPy, and the errors for arrays it cannot take.

    HALCYON_LIBRARY=build/lib/libhalcyon_runtime.so python3 python/tests/test_cpu.py
"""
import ctypes
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

# A prepared call (halcyon.prepare: checked and its implementation chosen once, then run as often
# as asked): each run reads the arrays as they are then, in place.
step = halcyon.prepare("vector_add", a=a, b=b, c=c)
check(step.impl == "host", f"the prepared call's implementation: {step.impl}")
for k in range(3):
    a[:] = rng.standard_normal(a.shape).astype(np.float32)  # new contents, same memory
    c[:] = np.nan
    step()
    check(np.array_equal(c, a + b), f"prepared vector_add, run {k}: c = a + b of the arrays' current contents")
step.close()
expect_error(step, "called after close()", "a closed prepared call")
expect_error(lambda: halcyon.prepare("vector_add", a=a, b=b, c=c[:-1]), "output 'c' has shape",
             "a prepared call with a wrong output shape (checked at prepare)")
expect_error(lambda: halcyon.prepare("vector_add", a=a, b=b, c=c, alpha=2), "unknown parameter 'alpha'",
             "a prepared call with an unknown param")
expect_error(lambda: halcyon.prepare("vector_add", a=a, b=[1.0], c=c), "'b' is a list", "a Python list, prepared")

# A device named without its index is device 0 (hal.h): "cpu" is the arrays' cpu:0, one device.
c[:] = np.nan
halcyon.run("vector_add", "cpu", a=a, b=b, c=c)
check(np.array_equal(c, a + b), "vector_add with device='cpu' on arrays of cpu:0")
step = halcyon.prepare("vector_add", "cpu", a=a, b=b, c=c)
check(step.uri == "cpu:0", f"a prepared call on device='cpu' is on {step.uri}")
step.close()
check(halcyon._device("cpu").value == halcyon._device("cpu:0").value, "'cpu' and 'cpu:0' share one device handle")
check(halcyon.empty((2,), "f32", "cpu").device == "cpu:0", "halcyon.empty(device='cpu') is on cpu:0")

# An implementation by name (impl=): the CPU's "host" runs, others are refused with the list.
c[:] = np.nan
halcyon.run("vector_add", a=a, b=b, c=c, impl="host")
check(np.array_equal(c, a + b), "vector_add with impl='host'")
step = halcyon.prepare("vector_add", a=a, b=b, c=c, impl="host")
check(step.impl == "host", f"a prepared call by name: {step.impl}")
step.close()
try:  # registered or not depending on the build (an ASan build has no PTX): refused either way
    halcyon.run("vector_add", a=a, b=b, c=c, impl="sm80")
    check(False, "impl='sm80' on the CPU: no error")
except halcyon.HalcyonError as e:
    check("'sm80' cannot run on cpu:0" in str(e) or "no implementation named 'sm80'" in str(e),
          f"impl='sm80' on the CPU: {e}")
expect_error(lambda: halcyon.prepare("vector_add", a=a, b=b, c=c, impl="nope"), "no implementation named 'nope'",
             "an unknown implementation, prepared")
expect_error(lambda: halcyon.run("vector_add", a=a, b=b, c=c, impl=3), "impl is a int", "impl not a str")

# The library's ABI: an older minor, or another major, is refused by name before any symbol is
# bound (this library passed the same check when it loaded above).
expect_error(lambda: halcyon._check_abi(1, 9, "old.so"), "old.so is halcyon ABI 1.9; this module needs 1.10",
             "a library of ABI 1.9 (no MoeLayer impl)")
expect_error(lambda: halcyon._check_abi(2, 0, "new.so"), "new.so is halcyon ABI 2.0", "a library of ABI 2.0")
halcyon._check_abi(1, 10, "this.so")
halcyon._check_abi(1, 12, "later.so")

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

# The FP8 layer (MoeLayer, created once, called twice): e4m3 expert weights as uint8 codes with
# 128x128-block scales, against the NumPy layer on the weights they stand for. The FP8 path
# also quantizes x and h per 1x128 group (3 mantissa bits), hence the looser bound.
H8, I8 = 256, 160  # two scale blocks along H, two along I (the second one short)


def e4m3_codes(shape):
    c = rng.integers(0, 256, shape).astype(np.uint8)
    return np.where((c & 0x7F) == 0x7F, c & 0xF0, c).astype(np.uint8)  # no NaN codes


def e4m3_value(c):
    c = c.astype(np.int32)
    e, m = (c >> 3) & 0xF, (c & 7).astype(np.float32)
    v = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e - 7))
    return np.where(c & 0x80, -v, v).astype(np.float32)


def dequantize(codes, scales):  # [E, N, K] codes, [E, ceil(N/128), ceil(K/128)] scales
    full = np.repeat(np.repeat(scales, 128, axis=1), 128, axis=2)[:, :codes.shape[1], :codes.shape[2]]
    return e4m3_value(codes) * full


xs8 = f32_to_bf16(rng.uniform(-1, 1, (T, H8)))
wr8 = f32_to_bf16(rng.uniform(-0.05, 0.05, (H8, E)))
fp8 = {"w_gate_up": e4m3_codes((E, 2 * I8, H8)), "w_down": e4m3_codes((E, H8, I8)),
       "w_gate_up_scale": rng.uniform(1e-4, 3e-4, (E, 3, 2)).astype(np.float32),
       "w_down_scale": rng.uniform(1e-4, 3e-4, (E, 2, 2)).astype(np.float32)}
layer = halcyon.MoeLayer(halcyon.bf16(wr8), bias=bias, fp8=fp8, topk=K, n_groups=G, topk_groups=TG)
check(layer.fp8_experts, "MoeLayer with FP8 weights runs FP8 experts on the cpu")
check(not layer.fp8_dequantized, "FP8 experts that run are not dequantized")
# fp8_fallback reaches the library (hrt_moe_fp8_weights.dequantize_elsewhere): where FP8 runs, as
# here, it changes nothing; tests/amd checks the dequantization on a device without FP8 kernels.
asked = halcyon.MoeLayer(halcyon.bf16(wr8), bias=bias, fp8=fp8, topk=K, n_groups=G, topk_groups=TG,
                         fp8_fallback="dequantize")
check(asked.fp8_experts and not asked.fp8_dequantized, "fp8_fallback='dequantize' where FP8 runs: FP8 experts")
asked.close()
expect_error(lambda: halcyon.MoeLayer(halcyon.bf16(wr8), fp8=fp8, topk=K, fp8_fallback="bf16"),
             "fp8_fallback must be 'fail' or 'dequantize'", "an unknown fp8_fallback")
# impl= reaches the library (hrt_moe_layer_impls, ABI 1.10): a name the CPU has runs, an unknown
# one is refused by name.
named = halcyon.MoeLayer(halcyon.bf16(wr8), bias=bias, fp8=fp8, topk=K, n_groups=G, topk_groups=TG,
                         impl={"moe_grouped_gemm_fp8": "host", "moe_gate": "host"})
check(named.fp8_experts, "MoeLayer(impl={...: 'host'}) on the cpu: FP8 experts")
named.close()
expect_error(lambda: halcyon.MoeLayer(halcyon.bf16(wr8), fp8=fp8, topk=K, n_groups=G, topk_groups=TG,
                                      impl={"moe_grouped_gemm_fp8": "nope"}),
             "no implementation named 'nope'", "MoeLayer with an unknown implementation")
expect_error(lambda: halcyon.MoeLayer(halcyon.bf16(wr8), fp8=fp8, topk=K, impl={"moe_gate": 3}),
             "both str", "MoeLayer impl values not str")
wgu8 = dequantize(fp8["w_gate_up"], fp8["w_gate_up_scale"]).transpose(0, 2, 1)  # [E, H, 2I] as moe_layer takes
wd8 = dequantize(fp8["w_down"], fp8["w_down_scale"]).transpose(0, 2, 1)  # [E, I, H]
want8 = moe_layer(bf16_to_f32(xs8), bf16_to_f32(wr8), wgu8, wd8, bias, K, G, TG)
out8 = layer(halcyon.bf16(xs8))
err = rel_error(bf16_to_f32(out8.array), want8)
check(err < 6e-2, f"FP8 MoeLayer against NumPy on the weights it stands for: relative error {err:.2e}")
again = halcyon.bf16(np.zeros_like(xs8))
layer(halcyon.bf16(xs8), out=again)
check(np.array_equal(again.array, out8.array), "a second call of the same layer into out= gives the same bits")
layer.close()
expect_error(lambda: layer(halcyon.bf16(xs8)), "called after close()", "a closed MoeLayer")
expect_error(lambda: halcyon.MoeLayer(halcyon.bf16(wr8), fp8=dict(fp8, w_down=e4m3_codes((E, H8, I8 + 8))),
                                      topk=K, n_groups=G, topk_groups=TG),
             "'fp8.w_down' has shape", "FP8 weights of mismatched shapes")
expect_error(lambda: halcyon.MoeLayer(halcyon.bf16(wr8), topk=K), "no expert weights", "a layer without experts")

# Export: halcyon memory written by an operator (exported and imported back: the same buffer)
# and viewed by NumPy without a copy (NumPy 1.x marks DLPack views read-only).
e = halcyon.empty((4099,), "f32")
halcyon.run("vector_add", a=a, b=b, c=e)
v1, v2 = np.from_dlpack(e), np.from_dlpack(e)
check(np.array_equal(v1, a + b), "halcyon.empty written by vector_add, read by NumPy")
check(v1.ctypes.data == v2.ctypes.data, "two NumPy views of one halcyon buffer share its memory")


def alive(handle):
    """Whether hal buffer `handle` is still held by anyone (a released handle is refused by name)."""
    info = halcyon._BufferInfo()
    info.struct_size = ctypes.sizeof(info)
    err = halcyon.load().hal_buffer_get_info(handle, ctypes.byref(info))
    halcyon.load().hal_error_free(err)
    return not err


h = ctypes.c_void_p(e._buffer.value)
del e
check(alive(h), "the NumPy views hold the buffer after its halcyon.empty went")
del v1, v2
check(not alive(h), "the buffer goes with the last NumPy view")
# A consumer that refuses an export (NumPy has no bfloat16): its own error reaches the caller (the
# capsule's destructor ran with it pending, lost it and was stopped before its deleter: a
# SystemError, and the buffer never released), and the exports are deleted.
e = halcyon.empty((4,), "bf16")
h = ctypes.c_void_p(e._buffer.value)
for k in range(2):
    try:
        np.from_dlpack(e)
        check(False, "NumPy took a bf16 export")
    except Exception as ex:  # noqa: BLE001 (NumPy's type: RuntimeError in 1.x, BufferError later)
        check(not isinstance(ex, SystemError) and "dtype" in str(ex).lower(),
              f"NumPy refusing a bf16 export, try {k}: {type(ex).__name__}: {ex}")
del e
check(not alive(h), "the refused exports were deleted: the buffer went with its halcyon.empty")
try:
    np.from_dlpack(halcyon.empty((4,), "bf16"))  # the tensor goes before the refused capsule
except Exception as ex:  # noqa: BLE001
    check(not isinstance(ex, SystemError), f"NumPy refusing a temporary's export: {type(ex).__name__}: {ex}")
check(len(halcyon._exports) <= 1, f"refused and consumed exports are not kept: {len(halcyon._exports)} held")
# Shapes whose size C cannot hold are refused by name (ctypes wrapped them: a buffer of the wrapped
# size exported with negative dimensions, or as a 2^67-byte tensor).
expect_error(lambda: halcyon.empty((-1, -2)), "shape (-1, -2) has a negative dimension", "empty of negative dims")
expect_error(lambda: halcyon.empty((1 << 62, 8), "f32"), "is 147573952589676412928 bytes, past 2^63-1",
             "empty of 2^67 bytes")
expect_error(lambda: halcyon.empty((0, 1 << 64), "u8"), "has a dimension past 2^63-1", "empty of 0 bytes, a dim past int64")
check(np.from_dlpack(halcyon.empty((0, 3), "f32")).shape == (0, 3), "empty with a zero dimension: a 0 x 3 array")

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

# Backend options for a library whose backends were discovered already, by a load whose hal_init a
# backend failed after discovery (amdgpu-sim refusing its option's value), are refused as not
# applied rather than dropped; the library works without them. A fresh process: this one is loaded.
retry = """
import sys
sys.path.insert(0, sys.argv[1])
import halcyon
try:
    halcyon.load(backend_options={"amdgpu-sim.max_instructions": "abc"})
    print("first load: taken")
except halcyon.HalcyonError as e:
    print("first load:", e)
try:
    halcyon.load(backend_options={"amdgpu-sim.max_instructions": "1000"})
    print("retry: taken")
except halcyon.HalcyonError as e:
    print("retry:", e)
"""
import subprocess  # noqa: E402
told = subprocess.run([sys.executable, "-c", retry, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")],
                      capture_output=True, text=True, timeout=120).stdout
if "max_instructions='abc'" in told:  # the build has the amdgpu-sim plugin
    check("retry: HAL_FAILED_PRECONDITION" in told and "not applied" in told,
          "options after a hal_init that failed after discovery: " + told.strip().replace("\n", " | "))
else:
    print("skipped (no amdgpu-sim backend refused the option): " + told.strip().replace("\n", " | "))

finish()
