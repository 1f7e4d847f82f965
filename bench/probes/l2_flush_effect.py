"""l2_flush_effect: what the way a benchmark empties the L2 between runs costs a read-bound kernel.

A diagnostic for issue 15 (docs/PERFORMANCE.md): at Hkv 2 halcyon's paged decode takes 132 us
alone under Nsight Compute (which invalidates the caches, leaving them clean) but 146 us in
`halcyon bench attention`, whose flush fills a 256 MiB buffer with a non-zero pattern before
each run; cuDNN, timed by triton's do_bench (whose flush is `cache.zero_()`), takes 132 us.
A flush by writes leaves the L2 full of dirty lines that the next kernel's reads must first
write back (up to the L2's 60 MB on an H200: ~13 us at the HBM rate, a tenth of a 537 MB read).

Times, with CUDA events around each run (median of --reps), after each of three flushes of
a 256 MiB buffer:
  zero     buffer.zero_()         (triton.testing.do_bench's flush)
  pattern  buffer.fill_(pattern)  (a non-zero value changed every run, as halcyon's bench does)
  read     buffer.sum()           (reads only: the L2 is left holding clean lines)
three kernels: a read-bound reduction over 512 MiB (torch.sum; decode at Hkv 2 reads 537 MB),
and cuDNN's SDPA decode at b64 Hq16 kv8192 d128, Hkv 2 and Hkv 16 (dense K/V, as
bench/attention_vs_torch.py times them).

Not part of the library; on the GPU machine: python3 bench/probes/l2_flush_effect.py
"""
import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

p = argparse.ArgumentParser()
p.add_argument("--reps", type=int, default=30)
args = p.parse_args()
dev, bf16 = torch.device("cuda:0"), torch.bfloat16
flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
flush32 = flush.view(torch.int32)


def do_flush(how, i):
    if how == "zero":
        flush.zero_()
    elif how == "pattern":
        flush32.fill_(0x3F803F80 + i)
    else:
        flush32.sum(dtype=torch.int64)


def time_us(fn, how):
    for i in range(3):
        do_flush(how, i)
        fn()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for i in range(args.reps):
        do_flush(how, i)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e3)
    return statistics.median(ts)


torch.manual_seed(0)
cases = []
big = torch.randn(256 << 20, dtype=bf16, device=dev)  # 512 MiB
cases.append(("sum over 512 MiB (read-bound)", lambda: big.sum(dtype=torch.float32), big.numel() * 2))
B, Hq, L, D = 64, 16, 8192, 128
for Hkv in (2, 16):
    q = torch.randn(B, Hq, 1, D, dtype=bf16, device=dev)
    k, v = (torch.randn(B, Hkv, L, D, dtype=bf16, device=dev) for _ in range(2))

    def fn(q=q, k=k, v=v, gqa=Hkv != Hq):
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)

    cases.append((f"cuDNN decode Hkv {Hkv}", fn, 2 * k.numel() * 2))

print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; flush buffer 256 MiB; "
      f"median of {args.reps} runs, us (GB/s of the kernel's bytes)", flush=True)
print(f"  {'kernel':<32}" + "".join(f"{h:>22}" for h in ("zero", "pattern", "read")), flush=True)
for name, fn, nbytes in cases:
    row = []
    for how in ("zero", "pattern", "read"):
        t = time_us(fn, how)
        row.append(f"{t:9.1f} ({nbytes / t / 1e3:6.0f} GB/s)")
    print(f"  {name:<32}" + "".join(f"{r:>22}" for r in row), flush=True)
