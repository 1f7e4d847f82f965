#!/usr/bin/env python3
"""The torch side of `halcyon bench moe`: the same MoE layer (DeepSeek-V3 routing: sigmoid,
8 groups, top-4 groups, top-8, x2.5; SwiGLU experts) in torch eager, stage by stage, plus a
device-to-device copy for the bandwidth floor, in the same device call as halcyon's numbers.

usage: moe_vs_torch.py [--tokens 4096,512,128] [--json FILE]
Times are medians of CUDA-event timings (triton.testing.do_bench, L2 flushed between runs)."""
import argparse, json, os, statistics
import torch
import torch.nn.functional as F
from triton.testing import do_bench

p = argparse.ArgumentParser()
p.add_argument("--tokens", default="4096,512,128")
p.add_argument("--experts", type=int, default=256)
p.add_argument("--topk", type=int, default=8)
p.add_argument("--hidden", type=int, default=7168)
p.add_argument("--inter", type=int, default=2048)
p.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "moe_torch.json"))
args = p.parse_args()

dev, bf16 = torch.device("cuda:0"), torch.bfloat16
E, K, H, I, G, TG = args.experts, args.topk, args.hidden, args.inter, 8, 4


def ms(fn, warmup=25, rep=200):
    return float(do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
n = 2**30  # 2 GiB of bf16, copied
src = torch.randn(n, dtype=bf16, device=dev)
dst = torch.empty_like(src)
t = ms(lambda: dst.copy_(src), 10, 100)
res["copy_TBps"] = 2 * n * 2 / (t * 1e-3) / 1e12
del src, dst
print(f"torch copy: {res['copy_TBps']:.2f} TB/s (read+write)", flush=True)

torch.manual_seed(0)
W1 = torch.randn(E, 2 * I, H, dtype=bf16, device=dev).mul_(0.02)  # nn.Linear layout
W2 = torch.randn(E, H, I, dtype=bf16, device=dev).mul_(0.02)
W1t, W2t = W1.transpose(1, 2), W2.transpose(1, 2)
Wg = torch.randn(E, H, dtype=bf16, device=dev).mul_(H ** -0.5)
bias = torch.randn(E, dtype=torch.float32, device=dev).mul_(0.01)
res["runs"] = []
for T in [int(v) for v in args.tokens.split(",")]:
    M = T * K
    x = torch.randn(T, H, dtype=bf16, device=dev)

    def gate(x):
        return torch.matmul(x, Wg.t()).float()

    def route(logits):
        s = logits.sigmoid()
        sel = s + bias
        gs = sel.view(T, G, E // G).topk(2, dim=-1).values.sum(-1)
        keep = torch.zeros_like(gs).scatter_(1, gs.topk(TG, dim=-1).indices, 1.0)
        sel = sel.masked_fill(keep.repeat_interleave(E // G, dim=1) == 0, float("-inf"))
        ids = sel.topk(K, dim=-1).indices
        w = s.gather(1, ids)
        return ids, w / w.sum(-1, keepdim=True) * 2.5

    def permute(x, ids):
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        xs = x.index_select(0, order // K)
        counts = torch.bincount(flat, minlength=E)
        return xs, order, counts.cumsum(0).to(torch.int32)

    def experts(xs, offs):
        h = torch._grouped_mm(xs, W1t, offs=offs)
        return torch._grouped_mm(F.silu(h[:, :I]) * h[:, I:], W2t, offs=offs)

    def combine(y, order, w):
        inv = torch.empty_like(order)
        inv[order] = torch.arange(M, device=dev)
        return torch.bmm(w.to(bf16).unsqueeze(1), y.index_select(0, inv).view(T, K, H)).squeeze(1)

    def layer():
        ids, w = route(gate(x))
        xs, order, offs = permute(x, ids)
        return combine(experts(xs, offs), order, w)

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
    r["gate_permute_combine_us"] = r["route_us"] + r["permute_us"] + r["combine_us"]
    r["expert_weight_GBps"] = (W1.numel() + W2.numel()) * 2 / (r["experts_ms"] * 1e-3) / 1e9
    res["runs"].append(r)
    print(f"torch T={T}: gate GEMM {r['gate_gemm_us']:.0f} us, route {r['route_us']:.0f} us, permute "
          f"{r['permute_us']:.0f} us, experts {r['experts_ms']:.2f} ms ({r['expert_weight_GBps']:.0f} GB/s of weights), "
          f"combine {r['combine_us']:.0f} us, layer {r['layer_ms']:.2f} ms", flush=True)
    del x, logits, ids, w, xs, order, offs, y
with open(args.json, "w") as f:
    json.dump(res, f, indent=1)
