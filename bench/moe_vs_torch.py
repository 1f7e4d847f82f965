#!/usr/bin/env python3
"""The torch side of `halcyon bench moe`: the same MoE layer (DeepSeek-V3 routing: sigmoid,
8 groups, top-4 groups, top-8, x2.5; SwiGLU experts) in torch eager, stage by stage, plus a
device-to-device copy for the bandwidth floor, in the same device call as halcyon's numbers.

usage: moe_vs_torch.py [--tokens 4096,512,128] [--dtype bf16|fp8] [--json FILE]
Times are medians of CUDA-event timings (triton.testing.do_bench, L2 flushed between runs).
--dtype fp8 adds FP8 experts (e4m3 weights, the same bytes as halcyon's): torch's own
torch._scaled_grouped_mm where the build has it, with the scaling it supports (one f32 scale
per token row and per weight output row: rowwise, NOT DeepSeek's 128x128 / 1x128 blocks, which
it does not take); else a composition that dequantizes each expert's block-scaled weights to bf16
and runs torch._grouped_mm. The JSON says which ("fp8_method")."""
import argparse, json, os, statistics
import torch
import torch.nn.functional as F
from triton.testing import do_bench

from moe_torch_layer import Model, by_expert, rowwise
from torch_peers import copy_rate_TBps

p = argparse.ArgumentParser()
p.add_argument("--tokens", default="4096,512,128")
p.add_argument("--experts", type=int, default=256)
p.add_argument("--topk", type=int, default=8)
p.add_argument("--hidden", type=int, default=7168)
p.add_argument("--inter", type=int, default=2048)
p.add_argument("--dtype", choices=["bf16", "fp8"], default="bf16")
p.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "moe_torch.json"))
args = p.parse_args()

dev, bf16 = torch.device("cuda:0"), torch.bfloat16
E, K, H, I, G, TG = args.experts, args.topk, args.hidden, args.inter, 8, 4


last_each = []  # the times of the last ms() call, in order (the JSON's "..._us_each": the spread)


def ms(fn, warmup=25, rep=200):
    global last_each
    last_each = [float(t) for t in do_bench(fn, warmup=warmup, rep=rep, return_mode="all")]
    return statistics.median(last_each)


res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
res["copy_TBps"] = copy_rate_TBps(dev, lambda fn: ms(fn, 10, 100))
print(f"torch copy: {res['copy_TBps']:.2f} TB/s (read+write)", flush=True)

m = Model(E, K, H, I, G, TG, dev)
W1, W2 = m.W1, m.W2
res["runs"] = []
fp8 = args.dtype == "fp8"
if fp8:
    W1q, W1s = by_expert(rowwise, W1)  # [E, 2I, H], [E, 2I]
    W2q, W2s = by_expert(rowwise, W2)  # [E, H, I], [E, H]
    # DeepSeek's 128 x 128 block scales of the same weights, for the dequantizing composition.
    W1b, W1bs, W2b, W2bs = m.fp8_blocks()
    fp8_method = "torch._scaled_grouped_mm (rowwise scales)" if hasattr(torch, "_scaled_grouped_mm") else None
    res["fp8_method"] = fp8_method
for T in [int(v) for v in args.tokens.split(",")]:
    x = torch.randn(T, H, dtype=bf16, device=dev)
    gate, route, permute, experts, combine = m.gate, m.route, m.permute, m.experts, m.combine

    def layer():
        return m.layer(x)

    def experts_fp8_scaled(xs, offs):
        qa, sa = rowwise(xs)
        h = torch._scaled_grouped_mm(qa, W1q.transpose(1, 2), sa, W1s, offs=offs, out_dtype=bf16)
        qh, sh = rowwise(F.silu(h[:, :I]) * h[:, I:])
        return torch._scaled_grouped_mm(qh, W2q.transpose(1, 2), sh, W2s, offs=offs, out_dtype=bf16)

    def dequant(q, s):  # s: [e, n / 128, k / 128]
        e, n, k = q.shape
        return q.to(bf16).view(e, n // 128, 128, k // 128, 128).mul_(s.to(bf16).view(e, n // 128, 1, k // 128, 1)).view(e, n, k)

    def experts_fp8_dequant(xs, offs):
        h = torch._grouped_mm(xs, dequant(W1b, W1bs).transpose(1, 2), offs=offs)
        return torch._grouped_mm(F.silu(h[:, :I]) * h[:, I:], dequant(W2b, W2bs).transpose(1, 2), offs=offs)

    def layer_fp8():
        return m.layer(x, experts_fp8)

    logits = gate(x)
    ids, w = route(logits)
    xs, order, offs = permute(x, ids)
    y = experts(xs, offs)
    r = {"tokens": T,
         "gate_gemm_us": ms(lambda: gate(x)) * 1e3,
         "route_us": ms(lambda: route(logits)) * 1e3,
         "permute_us": ms(lambda: permute(x, ids)) * 1e3,
         "experts_ms": ms(lambda: experts(xs, offs), 10, 100),
         "combine_us": ms(lambda: combine(y, order, w)) * 1e3,
         "layer_ms": ms(layer, 10, 100)}
    r["layer_us_each"] = [round(x * 1e3, 1) for x in last_each]
    r["gate_permute_combine_us"] = r["route_us"] + r["permute_us"] + r["combine_us"]
    if fp8:
        experts_fp8 = experts_fp8_scaled
        if fp8_method:
            try:
                experts_fp8(xs, offs)
            except Exception as e:  # this build's kernel refuses the call: say so, compose instead
                print(f"torch._scaled_grouped_mm failed: {e}", flush=True)
                fp8_method = None
        if not fp8_method:
            fp8_method = res["fp8_method"] = "dequantize 128x128 blocks to bf16 + torch._grouped_mm"
            experts_fp8 = experts_fp8_dequant
        r["fp8_method"] = fp8_method
        r["experts_fp8_ms"] = ms(lambda: experts_fp8(xs, offs), 10, 100)
        r["layer_fp8_ms"] = ms(layer_fp8, 10, 100)
        r["layer_fp8_us_each"] = [round(x * 1e3, 1) for x in last_each]
        r["expert_weight_fp8_GBps"] = (W1.numel() + W2.numel()) / (r["experts_fp8_ms"] * 1e-3) / 1e9
    r["expert_weight_GBps"] = (W1.numel() + W2.numel()) * 2 / (r["experts_ms"] * 1e-3) / 1e9
    res["runs"].append(r)
    print(f"torch T={T}: gate GEMM {r['gate_gemm_us']:.0f} us, route {r['route_us']:.0f} us, permute "
          f"{r['permute_us']:.0f} us, experts {r['experts_ms']:.2f} ms ({r['expert_weight_GBps']:.0f} GB/s of weights), "
          f"combine {r['combine_us']:.0f} us, layer {r['layer_ms']:.2f} ms", flush=True)
    if fp8:
        print(f"torch T={T} fp8 ({r['fp8_method']}): experts {r['experts_fp8_ms']:.2f} ms "
              f"({r['expert_weight_fp8_GBps']:.0f} GB/s of e4m3 weights), layer {r['layer_fp8_ms']:.2f} ms", flush=True)
    del x, logits, ids, w, xs, order, offs, y
with open(args.json, "w") as f:
    json.dump(res, f, indent=1)
