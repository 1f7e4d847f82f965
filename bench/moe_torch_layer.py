"""The torch side of the MoE comparisons (bench/moe_vs_torch.py, bench/paired_vs_torch.py): the
DeepSeek-V3 layer in eager PyTorch, bf16, with torch._grouped_mm for the experts, and its
weights, random (seed 0) and scaled for balanced routing; the FP8 forms of the same weights
(rowwise scales for torch._scaled_grouped_mm; DeepSeek's 128 x 128 block scales, which
halcyon's FP8 experts take)."""
import torch
import torch.nn.functional as F

bf16, e4m3 = torch.bfloat16, torch.float8_e4m3fn


def by_expert(fn, w, chunk=16):
    """fn over experts in chunks, so that fp32 temporaries stay small; (values, scales)."""
    parts = [fn(w[i:i + chunk]) for i in range(0, w.shape[0], chunk)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def rowwise(w):
    """One scale per row of the last dim, amax / 448: (e4m3 values, scales without that dim)."""
    s = w.float().abs().amax(-1, keepdim=True).clamp(min=1e-12) / 448.0
    return (w.float() / s).to(e4m3), s.squeeze(-1)


def blockwise(w):
    """DeepSeek's 128 x 128 block scales of [e, n, k]: e4m3 [e, n, k] and scales
    [e, n / 128, 1, k / 128, 1] (n and k multiples of 128)."""
    e, n, k = w.shape
    b = w.float().view(e, n // 128, 128, k // 128, 128)
    s = b.abs().amax(dim=(2, 4), keepdim=True).clamp(min=1e-12) / 448.0
    return (b / s).to(e4m3).view(e, n, k), s


class Model:
    """Weights: W1 [E, 2I, H] (nn.Linear layout, gate rows first), W2 [E, H, I], the router Wg
    [E, H] and the selection bias [E] f32. Routing: sigmoid scores, top-2 sum per group of E / G,
    TG groups kept, top-K, weights normalized and scaled by 2.5."""

    def __init__(self, E, K, H, I, G, TG, dev):
        self.E, self.K, self.H, self.I, self.G, self.TG, self.dev = E, K, H, I, G, TG, dev
        torch.manual_seed(0)
        self.W1 = torch.randn(E, 2 * I, H, dtype=bf16, device=dev).mul_(0.02)
        self.W2 = torch.randn(E, H, I, dtype=bf16, device=dev).mul_(0.02)
        self.W1t, self.W2t = self.W1.transpose(1, 2), self.W2.transpose(1, 2)
        self.Wg = torch.randn(E, H, dtype=bf16, device=dev).mul_(H ** -0.5)
        self.bias = torch.randn(E, dtype=torch.float32, device=dev).mul_(0.01)

    def fp8_blocks(self):
        """(W1 e4m3, its scales [E, 2I/128, H/128] f32, W2 e4m3, its scales [E, H/128, I/128])."""
        w1, s1 = by_expert(blockwise, self.W1)
        w2, s2 = by_expert(blockwise, self.W2)
        return w1, s1.reshape(self.E, 2 * self.I // 128, self.H // 128).contiguous(), w2, \
            s2.reshape(self.E, self.H // 128, self.I // 128).contiguous()

    def gate(self, x):
        return torch.matmul(x, self.Wg.t()).float()

    def route(self, logits):
        T, E, G, K = logits.shape[0], self.E, self.G, self.K
        s = logits.sigmoid()
        sel = s + self.bias
        gs = sel.view(T, G, E // G).topk(2, dim=-1).values.sum(-1)
        keep = torch.zeros_like(gs).scatter_(1, gs.topk(self.TG, dim=-1).indices, 1.0)
        sel = sel.masked_fill(keep.repeat_interleave(E // G, dim=1) == 0, float("-inf"))
        ids = sel.topk(K, dim=-1).indices
        w = s.gather(1, ids)
        return ids, w / w.sum(-1, keepdim=True) * 2.5

    def permute(self, x, ids):
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        xs = x.index_select(0, order // self.K)
        counts = torch.bincount(flat, minlength=self.E)
        return xs, order, counts.cumsum(0).to(torch.int32)

    def experts(self, xs, offs):
        I = self.I
        h = torch._grouped_mm(xs, self.W1t, offs=offs)
        return torch._grouped_mm(F.silu(h[:, :I]) * h[:, I:], self.W2t, offs=offs)

    def combine(self, y, order, w):
        T, M = w.shape[0], order.numel()
        inv = torch.empty_like(order)
        inv[order] = torch.arange(M, device=self.dev)
        return torch.bmm(w.to(bf16).unsqueeze(1), y.index_select(0, inv).view(T, self.K, self.H)).squeeze(1)

    def layer(self, x, experts=None):
        """The whole layer on x [T, H] bf16; `experts` replaces the bf16 experts (FP8 forms)."""
        ids, w = self.route(self.gate(x))
        xs, order, offs = self.permute(x, ids)
        return self.combine((experts or self.experts)(xs, offs), order, w)
