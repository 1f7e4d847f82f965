"""Puts halcyon's paged decode and torch SDPA's cuDNN decode on one CUPTI timeline (issue 15).

`halcyon bench attention decode` times a call between two events after a 256 MB flush write, and
so does triton's do_bench for cuDNN; Nsight Compute times each kernel alone. This probe records
what lies between: every kernel of a call (halcyon's decode and its split combine, cuDNN's one
kernel) with its start and end on the GPU, after the same flush write, through torch.profiler
(CUPTI sees the kernels of every context in the process, halcyon's included). Per shape it prints
the medians of: the call's span (first kernel start to last kernel end), each kernel's duration,
and the idle gap between halcyon's two kernels; after a flush by writing (as do_bench and
`halcyon bench` do: the L2 left full of dirty lines) and by reading (a sum of the buffer: clean lines).

  HALCYON_LIBRARY=build-gpu/lib/libhalcyon_runtime.so python3 bench/probes/decode_timeline.py

Not part of the library; a diagnostic run on the GPU machine. Shapes: b64 Hq16 kv8192 d128 at
Hkv 16 and 2, block 64, scrambled blocks (as the bench); cuDNN on the dense [B, Hkv, L, D] cache.
"""
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import halcyon  # noqa: E402
from torch_peers import paged_decode, split_calls, trace_kernels  # noqa: E402

dev, bf16 = torch.device("cuda:0"), torch.bfloat16
B, Hq, L, D, BS, REPS = 64, 16, 8192, 128, 64, 8
flush = torch.empty(2**26, dtype=torch.float32, device=dev)  # 256 MB, written or read before every call
out_dir = os.environ.get("OUT", ".")
torch.manual_seed(0)


def kernels(prof, tag):
    """Every kernel `prof` recorded: (name, start us, end us), in start order."""
    return trace_kernels(prof, os.path.join(out_dir, f"timeline_{tag}.json"))


def calls(ks, first):
    """Splits the kernel list into calls: each starts after a flush (a fill or reduce kernel)."""
    flush_kernel = lambda name: any(w in name.lower() for w in ("fill", "zero", "vectorized_elementwise", "reduce"))
    return [c for c in split_calls(ks, flush_kernel) if first(c[0][0])]


def med(xs):
    return statistics.median(xs) if xs else float("nan")


for (Hkv, how) in ((16, "write"), (2, "write"), (16, "read"), (2, "read")):
    paged, (qd, kd, vd) = paged_decode(B, Hq, Hkv, L, D, BS, dev)
    run = lambda: halcyon.run("attention_decode", **paged, scale=0.0)
    cudnn = lambda: F.scaled_dot_product_attention(qd, kd, vd, enable_gqa=Hkv != Hq)
    for _ in range(2):
        run()
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            cudnn()
    torch.cuda.synchronize()
    # write: 256 MB of zeros (do_bench's flush; the L2 left dirty); read: its sum (clean lines;
    # f32, so that the sum reads the buffer in place, with no widening copy).
    flush_l2 = flush.zero_ if how == "write" else (lambda: flush.sum())
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(REPS):
            flush_l2()
            torch.cuda.synchronize()  # as the paired rounds: the call starts on an idle GPU
            run()
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            for _ in range(REPS):
                flush_l2()
                cudnn()
        torch.cuda.synchronize()
    ks = kernels(prof, f"hkv{Hkv}_{how}")
    hal = calls(ks, lambda n: n.startswith("hc_attn"))
    cud = calls(ks, lambda n: "cudnn" in n or "sdpa" in n or "fmha" in n)
    print(f"Hkv {Hkv}, flush by {how}: {len(hal)} halcyon calls, {len(cud)} cuDNN calls (medians, us)")
    if hal:
        names = [k[0] for k in hal[0]]
        print(f"  halcyon kernels: {names}")
        print(f"  halcyon span {med([c[-1][2] - c[0][1] for c in hal]):8.1f}  " +
              "  ".join(f"k{i} {med([c[i][2] - c[i][1] for c in hal if len(c) > i]):8.1f}" for i in range(len(names))) +
              (f"  gap {med([c[1][1] - c[0][2] for c in hal if len(c) > 1]):6.1f}" if len(names) > 1 else ""))
    if cud:
        print(f"  cuDNN kernels: {[k[0][:60] for k in cud[0]]}")
        print(f"  cuDNN span {med([c[-1][2] - c[0][1] for c in cud]):8.1f}")
    del paged, qd, kd, vd
