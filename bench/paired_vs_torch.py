#!/usr/bin/env python3
"""halcyon's attention kernels and torch's (SDPA cuDNN; the torch composition for MLA), and
halcyon's FP8 MoE layer and torch eager's bf16 layer, timed in one process, call against call,
in the same power state (issues 15 and 19's comparisons).

Why: on the H200 the compute-bound kernels (prefill, the FP8 GEMMs) run at the full 1980 MHz
for their first ~50-100 ms of back-to-back work and then at a lower clock under the software
power cap (nvidia-smi throttle reason 0x4), ~8-10% slower for prefill. `halcyon bench`'s median
of 20 runs sits in the first regime, triton's do_bench (100-200 ms of runs) partly in the second,
so figures from the two programs are not comparable for such kernels (docs/PERFORMANCE.md,
2026-11-29 fifth session). Here every round runs halcyon's call and the peer's, each after the
same L2 flush (a 256 MB write, as both benches do), in alternating order, and the GPU times are
the kernels' own (torch.profiler / CUPTI: a call's span from its first kernel's start to its last
kernel's end, so host work between calls does not count). Two regimes per shape:
  burst      after 3 s idle, the first --rounds rounds;
  sustained  after --preheat seconds of rounds, the next --rounds rounds.
Per regime: each side's median span and the median of the per-round ratios halcyon / peer.

  HALCYON_LIBRARY=build-gpu/lib/libhalcyon_runtime.so python3 bench/paired_vs_torch.py \
      [--only prefill decode mla moe] [--rounds 30] [--preheat 2.0] [--json FILE]

moe (not in the default set): the DeepSeek-V3 layer at --moe-tokens (4096) tokens, 256 experts,
top-8 in 4 of 8 groups, H 7168, I 2048: halcyon.MoeLayer with FP8 experts (e4m3, 128 x 128
block scales of the same weights) against bench/moe_vs_torch.py's eager bf16 layer (issue 19's
2.5x target). Its calls are told apart by a flush kernel of their own (a bitwise NOT over the
256 MB): torch's layer launches fill kernels of its own.

deepgemm (not in the default set): halcyon's two FP8 grouped GEMMs against DeepGEMM's
(deepseek-ai/DeepGEMM, the block-scaled FP8 GEMMs DeepSeek-V3 runs; not part of halcyon: a
checkout of its Python JIT form, with CUTLASS's include/cute and include/cutlass under
deep_gemm/include, on PYTHONPATH; bench/README.md says which) on the same experts' rows at
--deepgemm-tokens (DeepSeek-V3's routing of random tokens, as the moe mode), the same e4m3 weights
and scales and the same quantized activations, in both of DeepGEMM's grouped layouts:
"contiguous" (each expert's rows padded to 128, as for prefill) and "masked" ([E, m_max, K] with
the row counts and expected_m = R / E, as for decode). halcyon's SwiGLU GEMM writes silu(g) * u
(I columns); DeepGEMM's gate/up GEMM writes g and u (2I columns) and has no SwiGLU. TFLOP/s count
the experts' rows, not DeepGEMM's padding.
"""
import argparse
import itertools
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import halcyon  # noqa: E402
from torch_peers import copy_rate_TBps, mla_composition, paged_decode, split_calls, trace_kernels  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--only", nargs="*", default=["prefill", "decode", "mla"], choices=["prefill", "decode", "mla", "moe", "deepgemm"])
p.add_argument("--moe-tokens", type=int, default=4096)
p.add_argument("--deepgemm-tokens", default="4096,512,128")
p.add_argument("--rounds", type=int, default=30)
p.add_argument("--preheat", type=float, default=2.0, help="seconds of rounds before the sustained regime")
p.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "paired.json"))
args = p.parse_args()
dev, bf16 = torch.device("cuda:0"), torch.bfloat16
flush = torch.empty(2**26, dtype=torch.float32, device=dev)  # 256 MB, written before every call
# The flush kernel that separates calls in the trace: torch's fill (zero_) unless a peer launches
# fills itself (the MoE layer), then a bitwise NOT over the same bytes.
FLUSHES = {"fill": (lambda: flush.zero_(), "FillFunctor"),
           "not": (lambda: flush.view(torch.int32).bitwise_not_(), "bitwise_not")}
flush_kind = "fill"
torch.manual_seed(0)
res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rounds": args.rounds,
       "preheat_s": args.preheat, "shapes": []}


def one_round(i, hal, peer):
    """One call of each side, after a flush each, halcyon first in even rounds."""
    for side in ((hal, peer) if i % 2 == 0 else (peer, hal)):
        FLUSHES[flush_kind][0]()
        torch.cuda.synchronize()  # each call starts on an idle GPU, after its flush
        side()
        torch.cuda.synchronize()


def spans(prof):
    """(halcyon spans, peer spans) in us: the kernels between two flushes form a call."""
    ks = trace_kernels(prof, os.path.join(os.environ.get("TMPDIR", "/tmp"), "paired_trace.json"))
    calls = split_calls(ks, lambda name: FLUSHES[flush_kind][1] in name)
    hal = [c[-1][2] - c[0][1] for c in calls if c[0][0].startswith("hc_")]
    peer = [c[-1][2] - c[0][1] for c in calls if not c[0][0].startswith("hc_")]
    return hal, peer


def regime(hal, peer, rounds):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for i in range(rounds):
            one_round(i, hal, peer)
    h, q = spans(prof)
    n = min(len(h), len(q))
    return {"halcyon_us": statistics.median(h) if h else None, "peer_us": statistics.median(q) if q else None,
            "ratio": statistics.median(h[i] / q[i] for i in range(n)) if n else None, "calls": [len(h), len(q)],
            "halcyon_us_each": [round(x, 1) for x in h], "peer_us_each": [round(x, 1) for x in q]}


def compare(name, peer_name, hal, peer, flops, weight_bytes=None):
    """Both regimes of one pair of calls, printed and kept in the JSON; with weight_bytes (the
    FP8 GEMMs) also the rate each side streams its weights at."""
    hal(), peer()
    torch.cuda.synchronize()
    time.sleep(3.0)  # idle: the power state resets
    burst = regime(hal, peer, args.rounds)
    t0, i = time.time(), 0
    while time.time() - t0 < args.preheat:
        one_round(i, hal, peer)
        i += 1
    sustained = regime(hal, peer, args.rounds)
    r = {"config": name, "peer": peer_name, "flops": flops, "weight_bytes": weight_bytes, "burst": burst,
         "sustained": sustained, "preheat_rounds": i}
    res["shapes"].append(r)
    for tag, g in (("burst", burst), ("sustained", sustained)):
        def rate(us):
            if not us:
                return "-"
            tb = f", weights {weight_bytes / (us * 1e-6) / 1e12:.2f} TB/s" if weight_bytes else ""
            return f"{flops / (us * 1e-6) / 1e12:.1f} TFLOP/s{tb}"
        print(f"  {name:<26} {tag:<9} halcyon {g['halcyon_us']:9.1f} us ({rate(g['halcyon_us'])})  "
              f"{peer_name} {g['peer_us']:9.1f} us ({rate(g['peer_us'])})  halcyon/peer {g['ratio']:.3f}  "
              f"calls {g['calls']}", flush=True)


print(f"{res['device']}, torch {res['torch']}: {args.rounds} rounds a regime, preheat {args.preheat} s", flush=True)
S = 4096
PREFILL = (("prefill d128 non-causal", 4, 16, False, 128), ("prefill d128 causal", 4, 16, True, 128),
           ("prefill d128 causal h128", 1, 128, True, 128), ("prefill d64 non-causal", 4, 16, False, 64))
for name, B, H, causal, D in PREFILL if "prefill" in args.only else ():
    q, k, v = (torch.randn(B, H, S, D, dtype=bf16, device=dev) for _ in range(3))
    # halcyon's packed layout [T, H, D] over the same values
    qp, kp, vp = (x.transpose(1, 2).reshape(B * S, H, D).contiguous() for x in (q, k, v))
    cu = torch.arange(0, (B + 1) * S, S, dtype=torch.int32, device=dev)
    out = torch.empty(B * S, H, D, dtype=bf16, device=dev)
    lse = torch.empty(B * S, H, dtype=torch.float32, device=dev)
    hal = lambda: halcyon.run("attention_prefill", q=qp, k=kp, v=vp, cu_seqlens_q=cu, cu_seqlens_k=cu, out=out,
                              lse=lse, causal=causal, scale=0.0)

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    pairs = S * S if not causal else S * (S + 1) // 2
    compare(name, "cudnn", hal, cudnn, 4.0 * B * H * pairs * D)
    del q, k, v, qp, kp, vp, out, lse

L, BS = 8192, 64
# Each shape twice: the paged cache's blocks scrambled against cuDNN on its own contiguous
# [B, Hkv, L, D] (the comparison), then "same cache": each sequence's blocks consecutive
# and cuDNN reading those very bytes ([B, L, Hkv, D] viewed as [B, Hkv, L, D]), so what is left
# between the two is the kernels, not the layout.
for Hkv, ordered in itertools.product((16, 2), (False, True)) if "decode" in args.only else ():
    B, Hq, D = 64, 16, 128
    paged, (qd, kd, vd) = paged_decode(B, Hq, Hkv, L, D, BS, dev, ordered)
    hal = lambda: halcyon.run("attention_decode", **paged, scale=0.0)

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            F.scaled_dot_product_attention(qd, kd, vd, enable_gqa=Hkv != Hq)

    compare(f"decode Hq16 Hkv{Hkv}{' same cache' if ordered else ''}", "cudnn", hal, cudnn, 4.0 * B * Hq * L * D)
    del paged, qd, kd, vd

for Sq in (1, 2) if "mla" in args.only else ():
    B, Hq = 64, 128
    NB, MB = B * L // BS, L // BS
    kv = torch.randn(B, L, 576, dtype=bf16, device=dev)
    q = torch.randn(B, Sq, Hq, 576, dtype=bf16, device=dev)
    table = torch.arange(NB, dtype=torch.int32, device=dev).reshape(B, MB)  # cache = kv, block by block
    cache = kv.reshape(NB, BS, 576)
    lens = torch.full((B,), L, dtype=torch.int32, device=dev)
    out = torch.empty(B, Sq, Hq, 512, dtype=bf16, device=dev)
    lse = torch.empty(B, Sq, Hq, dtype=torch.float32, device=dev)
    hal = lambda: halcyon.run("attention_mla_decode", q=q, kv_cache=cache, block_table=table, seq_lens=lens, out=out,
                              lse=lse, scale=0.0)
    compare(f"mla Hq128 Sq{Sq}", "torch", hal, mla_composition(q, kv),
            2.0 * B * Hq * (Sq * L - Sq * (Sq - 1) // 2) * (576 + 512))
    del kv, q

if "moe" in args.only:
    import moe_torch_layer  # noqa: E402  (bench/: the torch layer and weights of moe_vs_torch.py)
    T, E, K, H, I, G, TG = args.moe_tokens, 256, 8, 7168, 2048, 8, 4
    m = moe_torch_layer.Model(E, K, H, I, G, TG, dev)
    x = torch.randn(T, H, dtype=bf16, device=dev)
    w1q, w1s, w2q, w2s = m.fp8_blocks()
    layer = halcyon.MoeLayer(m.Wg.t().contiguous(), bias=m.bias, topk=K, n_groups=G, topk_groups=TG, routed_scale=2.5,
                             fp8=dict(w_gate_up=w1q, w_gate_up_scale=w1s, w_down=w2q, w_down_scale=w2s))
    if not layer.fp8_experts:
        sys.exit("halcyon.MoeLayer runs bf16 experts on this device: no FP8 comparison")
    out = torch.empty(T, H, dtype=bf16, device=dev)
    flush_kind = "not"
    compare(f"moe fp8 T{T} (halcyon)", "torch bf16 eager", lambda: layer(x, out), lambda: m.layer(x),
            2.0 * T * K * 3 * H * I)
    flush_kind = "fill"
    layer.close()
    del m, x, w1q, w1s, w2q, w2s, out

if "deepgemm" in args.only:
    import deepgemm_peer  # noqa: E402  (bench/: DeepGEMM's calls on halcyon's rows)
    from triton.testing import do_bench  # the copy rate of this call, as moe_vs_torch.py measures it
    res["copy_TBps"] = copy_rate_TBps(dev, lambda fn: do_bench(fn, warmup=10, rep=100, return_mode="median"))
    print(f"  device-to-device copy: {res['copy_TBps']:.3f} TB/s (read + write)", flush=True)
    for T in (int(v) for v in args.deepgemm_tokens.split(",")):
        for pair in deepgemm_peer.pairs(T, dev):
            compare(*pair)
        deepgemm_peer.release()

with open(args.json, "w") as f:
    json.dump(res, f, indent=1)
