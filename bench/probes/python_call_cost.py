#!/usr/bin/env python3
"""Host time of one halcyon.run call on torch CUDA tensors (queued on torch's stream, no wait),
and where it goes: the whole call, then its parts timed on their own (torch's __dlpack__, the
import of the three tensors, the stream import and release), the same call prepared once
(halcyon.prepare), a paged decode step run both ways, and cProfile's top entries.
    HALCYON_LIBRARY=build-gpu/lib/libhalcyon_runtime.so python3 bench/probes/python_call_cost.py"""
import cProfile
import ctypes
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import halcyon  # noqa: E402

dev = torch.device("cuda:0")
a = torch.randn(4096, device=dev)
b, c = torch.randn_like(a), torch.empty_like(a)
N = 2000


def per_call_us(fn, n=N):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    dt = time.perf_counter() - t0
    torch.cuda.synchronize()
    return dt / n * 1e6


print(f"halcyon.run('vector_add', 4096 floats): {per_call_us(lambda: halcyon.run('vector_add', a=a, b=b, c=c)):.1f} us a call")
print(f"torch a + b (out=c), for scale:          {per_call_us(lambda: torch.add(a, b, out=c)):.1f} us a call")
print(f"torch __dlpack__ of one tensor:          {per_call_us(lambda: a.__dlpack__()):.1f} us")
print(f"torch.cuda.current_stream():             {per_call_us(lambda: torch.cuda.current_stream(0).cuda_stream):.1f} us")


def imports_only():
    with halcyon._Imported("cuda:0", int(torch.cuda.current_stream(0).cuda_stream)) as imp:
        for name, t in (("a", a), ("b", b), ("c", c)):
            imp.add(name, t)


def stream_only():
    with halcyon._Imported("cuda:0", int(torch.cuda.current_stream(0).cuda_stream)) as imp:
        imp.stream()


print(f"three tensors imported and released:     {per_call_us(imports_only):.1f} us")

# hrt_run_op alone: the three tensors imported once, the call queued on torch's stream, N times.
with halcyon._Imported("cuda:0", int(torch.cuda.current_stream(0).cuda_stream)) as imp:
    for name, t in (("a", a), ("b", b), ("c", c)):
        imp.add(name, t)
    arr = (halcyon._Tensor * 3)(*imp.tensors)
    pars = (halcyon._Param * 1)()
    lib, dev_h, stream_h = halcyon.load(), halcyon._device("cuda:0"), imp.stream()
    run_only = lambda: halcyon._check(lib.hrt_run_op(dev_h, stream_h, b"vector_add", arr, 3, pars, 0))  # noqa: E731
    print(f"hrt_run_op alone (tensors imported once): {per_call_us(run_only):.1f} us")
print(f"the call's hal stream (torch's default stream: imported once a thread): {per_call_us(stream_only):.1f} us")
# The same call prepared once (halcyon.prepare: no import, check or choice a run), and a paged
# decode step (b64 Hq16 Hkv2 kv8192 d128: seven tensors) both ways.
add = halcyon.prepare("vector_add", a=a, b=b, c=c)
print(f"halcyon.prepare('vector_add') run:        {per_call_us(add):.1f} us a call ({add.impl})")
add.close()
Bd, Hq, Hkv, D, BS, L = 64, 16, 2, 128, 64, 8192
NB = Bd * L // BS
dec = dict(q=torch.randn(Bd, 1, Hq, D, dtype=torch.bfloat16, device=dev),
           k_cache=torch.randn(NB, BS, Hkv, D, dtype=torch.bfloat16, device=dev),
           v_cache=torch.randn(NB, BS, Hkv, D, dtype=torch.bfloat16, device=dev),
           block_table=torch.randperm(NB, device=dev).to(torch.int32).reshape(Bd, L // BS).contiguous(),
           seq_lens=torch.full((Bd,), L, dtype=torch.int32, device=dev),
           out=torch.empty(Bd, 1, Hq, D, dtype=torch.bfloat16, device=dev),
           lse=torch.empty(Bd, 1, Hq, dtype=torch.float32, device=dev))
step = halcyon.prepare("attention_decode", **dec, scale=0.0)
print(f"halcyon.run('attention_decode', 7 tensors): {per_call_us(lambda: halcyon.run('attention_decode', **dec, scale=0.0), 300):.1f} us a call")
print(f"halcyon.prepare('attention_decode') run:  {per_call_us(step, 300):.1f} us a call ({step.impl})")
step.close()
prof = cProfile.Profile()
prof.enable()
for _ in range(500):
    halcyon.run("vector_add", a=a, b=b, c=c)
prof.disable()
torch.cuda.synchronize()
pstats.Stats(prof).sort_stats("tottime").print_stats(12)
