"""halcyon's Python module on the Level Zero backend without an Intel GPU: the backend runs against
the fake driver of tests/level_zero (fake_ze.cpp: the SPIR-V kernels run on pocl), chosen through
the API (``halcyon.load(backend_options={"ze.loader": ...})``), and the tensors stand in for
PyTorch's XPU tensors: ``is_xpu`` true, a module named torch, DLPack as kDLOneAPI memory (ze:0).
What is checked: halcyon's ze tensors export as kDLOneAPI; a call on XPU tensors imports them in
place (the backend runs in the driver's default context, where SYCL's tensors live) after waiting
for torch's XPU stream on the host, once a tensor (halcyon does not import SYCL queues); results
are those of the CPU.

    HALCYON_LIBRARY=build/lib/libhalcyon_runtime.so python3 python/tests/test_ze_fake.py \\
        build/tests/level_zero/libhalcyon_fake_ze.so
"""
import ctypes
import os
import struct
import sys
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import halcyon  # noqa: E402
from checks import check, finish  # noqa: E402

FAKE = sys.argv[1]
halcyon.load(backend_options={"ze.loader": FAKE})
fake = ctypes.CDLL(FAKE)  # the file the backend opened: the same instance
fake.fakeze_count.argtypes = [ctypes.c_char_p]


# ---- a stand-in for PyTorch with XPU tensors ------------------------------------------------
class _XpuStream:
    waits = 0

    def synchronize(self):
        _XpuStream.waits += 1


torch = types.ModuleType("torch")
torch.xpu = types.SimpleNamespace(current_stream=lambda device=None: _XpuStream())
sys.modules["torch"] = torch


class Tensor:
    """f32 values on ze:0 as a PyTorch XPU tensor shows them to halcyon. The fake driver's device
    memory is host-visible, so the values are written and read in place."""
    is_cuda = False
    is_xpu = True
    device = "xpu:0"

    def __init__(self, values):
        self.n = len(values)
        self.mem = halcyon.empty((self.n,), "f32", "ze:0")
        data = struct.pack(f"{self.n}f", *values)
        ctypes.memmove(halcyon.device_address(self.mem), data, len(data))

    def values(self):
        out = ctypes.create_string_buffer(4 * self.n)
        ctypes.memmove(out, halcyon.device_address(self.mem), 4 * self.n)
        return list(struct.unpack(f"{self.n}f", out.raw))

    def __dlpack__(self, stream=None):
        return self.mem.__dlpack__()

    def __dlpack_device__(self):
        return self.mem.__dlpack_device__()


Tensor.__module__ = "torch"

n = 1000
a = Tensor([0.25 * i for i in range(n)])
b = Tensor([1.0 - 0.5 * i for i in range(n)])
c = Tensor([0.0] * n)
check(tuple(int(v) for v in a.__dlpack_device__()) == (14, 0), "a ze:0 tensor exports as kDLOneAPI (14), device 0")

allocs = fake.fakeze_count(b"zeMemAllocDevice")
halcyon.run("vector_add", a=a, b=b, c=c)
check(c.values() == [0.25 * i + (1.0 - 0.5 * i) for i in range(n)], "vector_add on XPU-like tensors: c = a + b")
check(_XpuStream.waits == 3, f"torch's XPU stream waited for once a tensor ({_XpuStream.waits})")
check(fake.fakeze_count(b"zeMemAllocDevice") == allocs, "the tensors were imported in place (no allocation)")
check(fake.fakeze_count(b"zeMemGetAllocProperties") >= 3, "each import was checked with zeMemGetAllocProperties")

# A prepared call waits at each run, too.
step = halcyon.prepare("vector_add", a=a, b=a, c=c)
_XpuStream.waits = 0
step()
check(_XpuStream.waits >= 1, f"a prepared call on XPU tensors waits for torch's stream ({_XpuStream.waits})")
check(c.values() == [0.5 * i for i in range(n)], "prepared vector_add on ze:0: c = a + a")
step.close()
finish()
