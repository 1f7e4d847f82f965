"""Pieces the torch-side bench scripts share (attention_vs_torch.py, paired_vs_torch.py,
probes/decode_timeline.py), so that each peer and each timeline reading is written once:

- mla_composition(q, kv): the torch composition MLA decode is compared with (absorbed form:
  q [B, Sq, Hq, 576] against one latent head kv [B, L, 576], V = its first 512 dims, the causal
  mask aligned bottom-right among the Sq new tokens);
- paged_decode(B, Hq, Hkv, L, D, BS): halcyon's attention_decode arguments over a paged cache in
  scrambled block order, and dense [B, Hkv, L, D] keys for cuDNN (SDPA has no paged cache);
- trace_kernels(prof, path) and split_calls(kernels, is_flush): the kernels a torch.profiler run
  recorded (CUPTI sees halcyon's too), cut into calls at each L2 flush kernel;
- copy_rate_TBps(dev, time_ms): the device-to-device copy rate, every script's bandwidth floor
  (moe_vs_torch.py too).
"""
import json

import torch

bf16 = torch.bfloat16


def copy_rate_TBps(dev, time_ms):
    """The copy rate of `dev` in TB/s, read + write: 2 GiB of random bf16 copied device to device,
    timed by time_ms(fn) (the caller's timer: the median ms of fn's runs). The floor each figure
    of a run is set against (docs/PERFORMANCE.md: "% of the copy rate"), so it is measured in the
    same process as they are."""
    src = torch.randn(2**30, dtype=bf16, device=dev)
    dst = torch.empty_like(src)
    rate = 2 * src.numel() * src.element_size() / (time_ms(lambda: dst.copy_(src)) * 1e-3) / 1e12
    del src, dst
    return rate


def mla_composition(q, kv):
    """A function computing MLA decode with torch ops: softmax(q kv^T * 576^-0.5) kv[..., :512]."""
    Sq, L = q.shape[1], kv.shape[1]
    scale = 576 ** -0.5
    mask = torch.ones(Sq, L, dtype=torch.bool, device=q.device).tril(L - Sq)  # bottom-right causal

    def run():
        s = torch.einsum("bshd,bld->bshl", q, kv).float() * scale
        if Sq > 1:
            s = s.masked_fill(~mask[None, :, None, :], float("-inf"))
        return torch.einsum("bshl,bld->bshd", s.softmax(-1).to(bf16), kv[..., :512])

    return run


def paged_decode(B, Hq, Hkv, L, D, BS, dev, ordered=False):
    """(args, dense): halcyon.run("attention_decode", **args, scale=0.0) reads a cache of L keys a
    sequence in blocks of BS in scrambled order; dense = (q [B, Hq, 1, D], k, v [B, Hkv, L, D]),
    k and v contiguous (the peer's own layout). ordered: each sequence's blocks consecutive, and
    dense's k and v are views of the same cache ([B, L, Hkv, D] seen as [B, Hkv, L, D]), so both
    sides read the same bytes."""
    NB, MB = B * L // BS, L // BS
    q = torch.randn(B, 1, Hq, D, dtype=bf16, device=dev)
    kc, vc = (torch.randn(NB, BS, Hkv, D, dtype=bf16, device=dev) for _ in range(2))
    order = torch.arange(NB, device=dev) if ordered else torch.randperm(NB, device=dev, dtype=torch.int64)
    table = order.to(torch.int32).reshape(B, MB).contiguous()
    args = {"q": q, "k_cache": kc, "v_cache": vc, "block_table": table,
            "seq_lens": torch.full((B,), L, dtype=torch.int32, device=dev),
            "out": torch.empty(B, 1, Hq, D, dtype=bf16, device=dev),
            "lse": torch.empty(B, 1, Hq, dtype=torch.float32, device=dev)}
    qd = q.transpose(1, 2).contiguous()
    if ordered:
        kd, vd = (c.view(B, L, Hkv, D).transpose(1, 2) for c in (kc, vc))
    else:
        kd, vd = (torch.randn(B, Hkv, L, D, dtype=bf16, device=dev) for _ in range(2))
    return args, (qd, kd, vd)


def trace_kernels(prof, path):
    """Every kernel `prof` recorded, as (name, start us, end us) in start order (via its Chrome
    trace, written to `path`)."""
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    return sorted(((e["name"], float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
                   if e.get("cat") == "kernel"), key=lambda k: k[1])


def split_calls(kernels, is_flush):
    """The kernels between one flush kernel (is_flush(name)) and the next, call by call; kernels
    before the first flush are left out."""
    calls, cur = [], None
    for k in kernels:
        if is_flush(k[0]):
            if cur:
                calls.append(cur)
            cur = []
        elif cur is not None:
            cur.append(k)
    if cur:
        calls.append(cur)
    return calls
