"""Runs torch SDPA's decode shape (b64 Hq16 kv8192 d128, dense KV, Sq 1) once per KV-head count
inside an NVTX range "sdpa", for Nsight Compute to profile the peer's kernels alone (issue 15):

  ncu --nvtx --nvtx-include "sdpa/" --section LaunchStats ... python3 bench/probes/sdpa_decode_once.py

Not part of the library; a diagnostic run on the GPU machine (bench/probes/decode_peer_run.sh).
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# argv: [cudnn|flash] [dirty]: "dirty" writes a 256 MB buffer right before the profiled call, as
# triton's do_bench (and halcyon bench's flush) do, so the kernel starts with dirty lines in L2.
backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[sys.argv[1] if len(sys.argv) > 1 else "cudnn"]
dirty = torch.empty(2**26, dtype=torch.int32, device="cuda:0") if "dirty" in sys.argv[2:] else None
dev, bf16 = torch.device("cuda:0"), torch.bfloat16
B, Hq, L, D = 64, 16, 8192, 128
for Hkv in (16, 2):
    q = torch.randn(B, Hq, 1, D, dtype=bf16, device=dev)
    k, v = (torch.randn(B, Hkv, L, D, dtype=bf16, device=dev) for _ in range(2))
    with sdpa_kernel([backend]):
        run = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=Hkv != Hq)
        run()  # plans and warms up outside the range
        torch.cuda.synchronize()
        if dirty is not None:
            dirty.zero_()
        torch.cuda.nvtx.range_push("sdpa")
        run()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    print(f"Hkv {Hkv}: done", flush=True)
