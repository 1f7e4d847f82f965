"""The MoE layer in NumPy (float32, bf16 inputs as uint16 bits): the oracle for halcyon.moe_layer
in test_cpu.py and test_torch_gpu.py. Group-limited routing as DeepSeek-V3: sigmoid (or
softmax) scores, a bias for selection only, groups ranked by the sum of their top-2, top-k
experts inside the best groups, weights normalised and scaled; SwiGLU experts."""
import numpy as np


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):  # round to nearest even
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def moe_layer(x, w_router, w_gate_up, w_down, bias, topk, n_groups, topk_groups, routed_scale=2.5):
    """All arrays float32; returns float32 [T, H]."""
    T, H = x.shape
    E = w_router.shape[1]
    I = w_down.shape[1]
    scores = 1.0 / (1.0 + np.exp(-(x @ w_router)))
    sel = scores + (bias if bias is not None else 0.0)
    groups = sel.reshape(T, n_groups, E // n_groups)
    group_score = np.sort(groups, axis=-1)[:, :, -2:].sum(-1)
    keep = np.argsort(-group_score, axis=-1, kind="stable")[:, :topk_groups]
    mask = np.full((T, n_groups), -np.inf, dtype=np.float32)
    np.put_along_axis(mask, keep, 0.0, axis=-1)
    sel = sel + np.repeat(mask, E // n_groups, axis=1)
    ids = np.argsort(-sel, axis=-1, kind="stable")[:, :topk]
    w = np.take_along_axis(scores, ids, axis=-1)
    w = w / w.sum(-1, keepdims=True) * routed_scale
    out = np.zeros((T, H), dtype=np.float32)
    for t in range(T):
        for k in range(topk):
            e = ids[t, k]
            h = x[t] @ w_gate_up[e]
            gate, up = h[:I], h[I:]
            act = gate / (1.0 + np.exp(-gate)) * up
            out[t] += w[t, k] * (act @ w_down[e])
    return out


def rel_error(got, want):
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
