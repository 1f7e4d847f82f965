#!/usr/bin/env python3
"""The torch side of `halcyon bench attention`, in the same device call: torch SDPA with its
cuDNN and flash backends on the prefill and decode shapes, and a torch composition for MLA
decode (absorbed form: q [B, Sq, Hq, 576] against one latent head of 576, V = its first 512
dims), plus a device-to-device copy for the bandwidth floor.

Shapes (issue 15's targets): prefill bf16 d128 s4096, b4 h16 causal and not, b1 h128 causal;
decode b64 Hq16 Hkv16/Hkv2 kv8192 d128 (dense KV: SDPA has no paged cache, so torch reads
contiguous K/V, which favours it; the "BLHD" lines read the same keys with the heads interleaved
along each row, halcyon's cache layout, unpaged); MLA b64 Hq128 kv8192, Sq 1 and 2. `peak`: the dense bf16 rate
cuBLAS reaches here (torch.mm 8192^3, and torch.bmm on the MLA's own two products), what MLA
decode's FLOP bound is read against.

usage: attention_vs_torch.py [--json FILE] [--seqlen N] [--kv N] [--only prefill|decode|mla|peak ...]
Times are medians of CUDA-event timings (triton.testing.do_bench, L2 flushed between runs)."""
import argparse, json, os, statistics
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

from torch_peers import copy_rate_TBps, mla_composition

p = argparse.ArgumentParser()
p.add_argument("--seqlen", type=int, default=4096)
p.add_argument("--kv", type=int, default=8192)
p.add_argument("--only", nargs="*", default=["prefill", "decode", "mla"], choices=["prefill", "decode", "mla", "peak"],
               help="the families to time (all by default); the copy rate is always measured")
p.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "attention_torch.json"))
args = p.parse_args()
dev, bf16 = torch.device("cuda:0"), torch.bfloat16


last_each = []  # the times of the last ms() call, in order (the JSON's "us_each": the spread)


def ms(fn, warmup=10, rep=100):
    global last_each
    last_each = [float(t) for t in do_bench(fn, warmup=warmup, rep=rep, return_mode="all")]
    return statistics.median(last_each)


res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "runs": []}
res["copy_TBps"] = copy_rate_TBps(dev, ms)
print(f"torch copy: {res['copy_TBps']:.2f} TB/s (read+write)", flush=True)


def report(name, backend, t, flops, kv_bytes):
    r = {"config": name, "backend": backend, "us": t * 1e3, "tflops": flops / (t * 1e-3) / 1e12,
         "kv_GBps": kv_bytes / (t * 1e-3) / 1e9, "kv_of_copy_rate": kv_bytes / (t * 1e-3) / (res["copy_TBps"] * 1e12),
         "us_each": [round(x * 1e3, 2) for x in last_each]}
    res["runs"].append(r)
    print(f"  {name:<28} {backend:<8} {r['us']:10.1f} us {r['tflops']:8.1f} TFLOP/s {r['kv_GBps']:8.0f} GB/s KV", flush=True)


def sdpa(name, q, k, v, causal, flops, kv_bytes):
    for backend, which in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel([which]):
                fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
                fn()
                report(name, backend, ms(fn), flops, kv_bytes)
        except Exception as e:  # a backend that refuses the shape says so
            print(f"  {name:<28} {backend:<8} unavailable: {str(e).splitlines()[0][:100]}", flush=True)


torch.manual_seed(0)
S = args.seqlen
PREFILL = (("prefill d128 non-causal", 4, 16, False, 128), ("prefill d128 causal", 4, 16, True, 128),
           ("prefill d128 causal h128", 1, 128, True, 128), ("prefill d64 non-causal", 4, 16, False, 64))
for name, B, H, causal, D in PREFILL if "prefill" in args.only else ():
    q, k, v = (torch.randn(B, H, S, D, dtype=bf16, device=dev) for _ in range(3))
    pairs = S * S if not causal else S * (S + 1) // 2
    sdpa(name, q, k, v, causal, 4.0 * B * H * pairs * D, 2.0 * B * H * S * D * 2)
    del q, k, v

L = args.kv
DECODE = (("decode Hq16 Hkv16", 16, 128), ("decode Hq16 Hkv2", 2, 128), ("decode d64 Hq16 Hkv16", 16, 64),
          ("decode d64 Hq16 Hkv2", 2, 64))
for name, Hkv, D in DECODE if "decode" in args.only else ():
    B, Hq = 64, 16
    q = torch.randn(B, Hq, 1, D, dtype=bf16, device=dev)
    k, v = (torch.randn(B, Hkv, L, D, dtype=bf16, device=dev) for _ in range(2))
    # Sq = 1 sees every key: causal would align top-left in SDPA, so it is off.
    sdpa(name, q, k, v, False, 4.0 * B * Hq * L * D, 2.0 * B * Hkv * L * D * 2)
    del k, v
    # The same keys with the heads interleaved along each row, as halcyon's cache holds them
    # ([B, L, Hkv, D] seen as [B, Hkv, L, D]; not paged): what that layout costs the peer.
    k, v = (torch.randn(B, L, Hkv, D, dtype=bf16, device=dev).transpose(1, 2) for _ in range(2))
    sdpa(name + " BLHD", q, k, v, False, 4.0 * B * Hq * L * D, 2.0 * B * Hkv * L * D * 2)
    del q, k, v

for Sq in (1, 2) if "mla" in args.only else ():
    B, Hq = 64, 128
    kv = torch.randn(B, L, 576, dtype=bf16, device=dev)
    q = torch.randn(B, Sq, Hq, 576, dtype=bf16, device=dev)
    scale = 576 ** -0.5
    mask = torch.ones(Sq, L, dtype=torch.bool, device=dev).tril(L - Sq)  # bottom-right causal (SDPA's mask below)
    mla = mla_composition(q, kv)

    mla()
    flops = 2.0 * B * Hq * (Sq * L - Sq * (Sq - 1) // 2) * (576 + 512)
    report(f"mla Hq128 Sq{Sq}", "torch", ms(mla), flops, B * L * 576 * 2)
    # The same through SDPA (one KV head broadcast to 128; V = the first 512 dims).
    qh = q.transpose(1, 2)
    kh = kv[:, None]
    vh = kv[:, None, :, :512]
    for backend, which in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                           ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel([which]):
                fn = lambda: F.scaled_dot_product_attention(qh, kh.expand(-1, Hq, -1, -1), vh.expand(-1, Hq, -1, -1),
                                                            attn_mask=mask if Sq > 1 else None, scale=scale)
                fn()
                report(f"mla Hq128 Sq{Sq}", backend, ms(fn), flops, B * L * 576 * 2)
        except Exception as e:
            print(f"  mla Hq128 Sq{Sq:<19} {backend:<8} unavailable: {str(e).splitlines()[0][:100]}", flush=True)
    del kv, q

if "peak" in args.only:
    res["peak"] = []
    a, b = (torch.randn(8192, 8192, dtype=bf16, device=dev) for _ in range(2))
    qm = torch.randn(64, 128, 576, dtype=bf16, device=dev)
    kvm = torch.randn(64, L, 576, dtype=bf16, device=dev)
    pm = torch.randn(64, 128, L, dtype=bf16, device=dev)
    for name, fn, flops in (("mm 8192x8192x8192", lambda: a @ b, 2.0 * 8192**3),
                            (f"bmm 64 x [128x576]x[576x{L}] (MLA S)", lambda: torch.bmm(qm, kvm.transpose(1, 2)),
                             2.0 * 64 * 128 * 576 * L),
                            (f"bmm 64 x [128x{L}]x[{L}x512] (MLA P V)", lambda: torch.bmm(pm, kvm[..., :512]),
                             2.0 * 64 * 128 * L * 512)):
        fn()
        t = ms(fn)
        res["peak"].append({"gemm": name, "us": t * 1e3, "tflops": flops / (t * 1e-3) / 1e12})
        print(f"  cuBLAS bf16 {name:<40} {t * 1e3:10.1f} us {flops / (t * 1e-3) / 1e12:8.1f} TFLOP/s", flush=True)
    del a, b, qm, kvm, pm

with open(args.json, "w") as f:
    json.dump(res, f, indent=1)
