"""halcyon's Python module on the HIP backend without an AMD GPU: the backend runs against the fake
HIP runtime of tests/hip (fake_hip.cpp: the GCN code objects run on amdgpu-sim's core), chosen
through the API (``halcyon.load(backend_options={"hip.library": ...})``), and the tensors stand in
for a ROCm build of PyTorch: ``is_cuda`` true, a module named torch, DLPack as kDLROCM memory,
``torch.cuda.current_stream().cuda_stream`` a hipStream_t. What is checked: a call on such tensors
is queued on torch's current stream (hal_stream_import of the hipStream_t) without any host wait,
as on cuda:; a prepared call follows the stream current at each run; a call that mixes in other
tensors, or a runtime that cannot import a stream (before ROCm 6, no hipStreamGetDevice), waits
on the host as before; results are those of the CPU.

    HALCYON_LIBRARY=build/lib/libhalcyon_runtime.so python3 python/tests/test_hip_fake.py \\
        build/tests/hip/libhalcyon_fake_hip.so
"""
import ctypes
import os
import struct
import sys
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import halcyon  # noqa: E402
from checks import check, expect_error, finish  # noqa: E402

FAKE = sys.argv[1]
# A malformed key ('_' for '.') is refused before discovery (hal.h's hal_init), so the library is
# still uninitialised and the corrected load below must be taken, not refused as a second one.
expect_error(lambda: halcyon.load(backend_options={"hip_library": FAKE}), "'hip_library=",
             "a malformed backend option key, naming it")
halcyon.load(backend_options={"hip.library": FAKE})
fake = ctypes.CDLL(FAKE)  # the file the backend opened: the same instance, so the same devices
fake.fakehip_last_launch_stream.restype = ctypes.c_void_p
fake.fakehip_count.argtypes = [ctypes.c_char_p]
fake.hipMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
H2D, D2H = 1, 2  # hipMemcpyKind

expect_error(lambda: halcyon.load(backend_options={"hip.library": FAKE}), "initialised already",
             "backend options after the library is initialised")


def hip(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what}: hipError {rc}")


def new_stream():
    s = ctypes.c_void_p()
    hip(fake.hipStreamCreateWithFlags(ctypes.byref(s), 0), "hipStreamCreateWithFlags")
    return s.value


# ---- a stand-in for a ROCm PyTorch ----------------------------------------------------------
class _Stream:
    def __init__(self, handle):
        self.cuda_stream = handle or 0

    def synchronize(self):
        hip(fake.hipStreamSynchronize(ctypes.c_void_p(self.cuda_stream)), "hipStreamSynchronize")


current = [_Stream(0)]  # torch.cuda.current_stream()
torch = types.ModuleType("torch")
torch.cuda = types.SimpleNamespace(current_stream=lambda device=None: current[0])
torch.version = types.SimpleNamespace(hip="6.2", cuda=None)
sys.modules["torch"] = torch


class Tensor:
    """f32 values on hip:0 as a ROCm PyTorch tensor shows them to halcyon."""
    is_cuda = True
    device = "cuda:0"  # what ROCm PyTorch calls its HIP devices

    def __init__(self, values):
        self.n = len(values)
        self.mem = halcyon.empty((self.n,), "f32", "hip:0")
        data = struct.pack(f"{self.n}f", *values)
        hip(fake.hipMemcpyAsync(halcyon.device_address(self.mem), data, len(data), H2D, None), "upload")

    def values(self):
        out = ctypes.create_string_buffer(4 * self.n)
        hip(fake.hipMemcpyAsync(out, halcyon.device_address(self.mem), 4 * self.n, D2H, None), "download")
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
want = [0.25 * i + (1.0 - 0.5 * i) for i in range(n)]


def launches():
    return fake.fakehip_count(b"hipModuleLaunchKernel")


def host_waits():
    return fake.fakehip_count(b"hipStreamSynchronize")


def without_stream_import():
    """Before ROCm 6 (no hipStreamGetDevice) the HIP backend refuses to import a stream, since it
    cannot check its device. The module asks once a device, so this runs in a process of its own:
    calls on torch tensors there wait for torch's stream on the host, and still run."""
    current[0] = _Stream(side)
    fake.fakehip_reset()
    fake.fakehip_inject(b"no_stream_device")
    halcyon.run("vector_add", a=a, b=b, c=c)
    check(fake.fakehip_last_launch_stream() not in (side, None) and host_waits() >= 1,
          f"no hipStreamGetDevice: the call waits on the host and runs on halcyon's stream "
          f"({host_waits()} host waits)")
    check(c.values() == want, "no hipStreamGetDevice: c = a + b")


def with_stream_import():
    # A call on torch tensors is queued on torch's current stream, with no host wait.
    current[0] = _Stream(side)
    fake.fakehip_reset()
    halcyon.run("vector_add", a=a, b=b, c=c)
    check(launches() == 1 and fake.fakehip_last_launch_stream() == side,
          f"run on ROCm torch tensors: launched on torch's current stream ({launches()} launch)")
    check(host_waits() == 0, f"run on ROCm torch tensors: no host wait ({host_waits()} hipStreamSynchronize)")
    check(fake.fakehip_count(b"hipStreamGetDevice") >= 1, "the stream was imported (its device checked)")
    check(c.values() == want, "vector_add on hip:0 through the fake runtime: c = a + b")

    # On torch's default stream (HIP's null stream, 0).
    current[0] = _Stream(0)
    fake.fakehip_reset()
    halcyon.run("vector_add", a=a, b=a, c=c)
    check(launches() == 1 and not fake.fakehip_last_launch_stream() and host_waits() == 0,
          "run on torch's default stream: on the null stream, no host wait")
    check(c.values() == [0.5 * i for i in range(n)], "vector_add on the null stream: c = a + a")

    # A prepared call takes the stream current at each run.
    step = halcyon.prepare("vector_add", a=a, b=b, c=c)
    other = new_stream()
    for s in (side, other):
        current[0] = _Stream(s)
        fake.fakehip_reset()
        step()
        check(fake.fakehip_last_launch_stream() == s and host_waits() == 0,
              f"prepared call: run on the stream current at the run ({'side' if s == side else 'other'})")
    check(c.values() == want, "prepared vector_add on hip:0: c = a + b")
    step.close()

    # A tensor that is not torch's: the call runs on halcyon's stream after a host wait, as before.
    plain = halcyon.empty((n,), "f32", "hip:0")
    current[0] = _Stream(side)
    fake.fakehip_reset()
    halcyon.run("vector_add", a=a, b=b, c=plain)
    check(fake.fakehip_last_launch_stream() not in (side, None) and host_waits() >= 1,
          f"a call with a non-torch tensor: on halcyon's stream, waited for ({host_waits()} host waits)")

    import subprocess
    r = subprocess.run([sys.executable, __file__, FAKE, "no_stream_device"], capture_output=True, text=True)
    print(r.stdout, end="")
    check(r.returncode == 0, f"the process without hipStreamGetDevice exited {r.returncode} {r.stderr.strip()[-300:]}")


side = new_stream()
if sys.argv[2:] == ["no_stream_device"]:
    without_stream_import()
else:
    with_stream_import()
finish()
