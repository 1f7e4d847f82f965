"""DeepGEMM's block-scaled FP8 grouped GEMMs on the rows halcyon's FP8 GEMMs take, for
bench/paired_vs_torch.py --only deepgemm (issue 19's peer at the kernel level).

DeepGEMM (github.com/deepseek-ai/DeepGEMM) is the FP8 GEMM library DeepSeek-V3 is run with; it
is not part of halcyon and nothing here is taken from it: the script calls its Python API
(`m_grouped_gemm_fp8_fp8_bf16_nt_contiguous` / `_masked`, the 2025 JIT form; bench/README.md
names the commit) when a checkout is on PYTHONPATH, and says so and stops when none is.

One token count: DeepSeek-V3's routing of T random tokens (bench/moe_torch_layer.py's model: 256
experts, top-8 in 4 of 8 groups, H 7168, I 2048) gives each expert its rows; the activations are
random bf16 quantized in 1 x 128 groups (amax / 448, as DeepSeek's act_quant), the weights the
model's in e4m3 with 128 x 128 block scales: the same bytes for both libraries. Each side's
output is checked against the other's before anything is timed."""
import sys

import torch
import torch.nn.functional as F

import halcyon
from moe_torch_layer import Model

E, K, H, I, G, TG = 256, 8, 7168, 2048, 8, 4
bf16, e4m3, u8 = torch.bfloat16, torch.float8_e4m3fn, torch.uint8
_state = {}  # the model and its FP8 weights, kept across token counts; the calls of the current one


def _deep_gemm():
    try:
        import deep_gemm
        return deep_gemm
    except ImportError as e:
        sys.exit(f"--only deepgemm: DeepGEMM is not importable ({e}); put a checkout on PYTHONPATH "
                 "(bench/README.md)")


def quantize_rows(x):
    """e4m3 values and f32 scales [R, C / 128] of x [R, C] bf16, one scale per 1 x 128 group."""
    R, C = x.shape
    g = x.float().view(R, C // 128, 128)
    s = g.abs().amax(-1, keepdim=True).clamp(min=1e-4) / 448.0
    return (g / s).to(e4m3).view(R, C), s.squeeze(-1).contiguous()


def _weights(dev):
    if "w" not in _state:
        m = Model(E, K, H, I, G, TG, dev)
        _state["w"] = m.fp8_blocks()
        del m.W1, m.W2, m.W1t, m.W2t  # the router (Wg, bias) is all that is used from here on
        _state["model"] = m
    return _state["model"], _state["w"]


def _scatter_rows(q, s, dst, rows):
    """q [R, C] e4m3 and s [R, C / 128] into `rows` zero rows at positions dst (byte copies:
    float8 tensors take no indexed writes)."""
    qp = torch.zeros(rows, q.shape[1], dtype=u8, device=q.device)
    qp[dst] = q.view(u8)
    sp = torch.zeros(rows, s.shape[1], dtype=torch.float32, device=q.device)
    sp[dst] = s
    return qp.view(e4m3), sp


def _rel(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm().clamp(min=1e-30)).item()


def pairs(T, dev):
    """[(name, peer name, halcyon call, peer call, useful flops, weight bytes)] for T tokens: the
    SwiGLU GEMM and the down GEMM, each against DeepGEMM's contiguous and masked layouts."""
    dg = _deep_gemm()
    m, (w1q, w1s, w2q, w2s) = _weights(dev)
    torch.manual_seed(T)
    ids, _ = m.route(m.gate(torch.randn(T, H, dtype=bf16, device=dev)))
    counts = torch.bincount(ids.reshape(-1), minlength=E)
    R = T * K
    offs = torch.zeros(E + 1, dtype=torch.int32, device=dev)
    offs[1:] = counts.cumsum(0)
    a_q, a_s = quantize_rows(torch.randn(R, H, dtype=bf16, device=dev))
    h_q, h_s = quantize_rows(torch.randn(R, I, dtype=bf16, device=dev))

    # halcyon: the rows as the layer has them, expert after expert.
    h_out = torch.empty(R, I, dtype=bf16, device=dev)
    y_out = torch.empty(R, H, dtype=bf16, device=dev)
    hal_sw = halcyon.prepare("moe_grouped_gemm_fp8_swiglu", a=halcyon.e4m3(a_q), a_scale=a_s,
                             w_gate_up=halcyon.e4m3(w1q), w_scale=w1s, expert_offsets=offs, out=h_out)
    hal_dn = halcyon.prepare("moe_grouped_gemm_fp8", a=halcyon.e4m3(h_q), a_scale=h_s, w=halcyon.e4m3(w2q),
                             w_scale=w2s, expert_offsets=offs, out=y_out)

    # Where row r (expert e, its i-th) sits in DeepGEMM's layouts.
    expert = torch.repeat_interleave(torch.arange(E, device=dev), counts)
    pos = torch.arange(R, device=dev) - offs[:-1].long()[expert]
    padded = (counts + 127) // 128 * 128
    starts = torch.cumsum(padded, 0) - padded
    dst_c, Mc = starts[expert] + pos, int(padded.sum())
    m_indices = torch.repeat_interleave(torch.arange(E, device=dev, dtype=torch.int32), padded)
    m_max = max(128, (int(counts.max()) + 127) // 128 * 128)
    dst_m = expert * m_max + pos
    expected_m = max(1, R // E)

    ac_q, ac_s = _scatter_rows(a_q, a_s, dst_c, Mc)
    hc_q, hc_s = _scatter_rows(h_q, h_s, dst_c, Mc)
    am_q, am_s = _scatter_rows(a_q, a_s, dst_m, E * m_max)
    hm_q, hm_s = _scatter_rows(h_q, h_s, dst_m, E * m_max)
    # DeepGEMM's LHS scales transposed and TMA-aligned once here, so that a call does no copy.
    align = dg.get_col_major_tma_aligned_tensor
    ac_s, hc_s = align(ac_s), align(hc_s)
    am_q, hm_q = am_q.view(E, m_max, H), hm_q.view(E, m_max, I)
    am_s, hm_s = align(am_s.view(E, m_max, -1)), align(hm_s.view(E, m_max, -1))
    gu_c = torch.empty(Mc, 2 * I, dtype=bf16, device=dev)
    yc = torch.empty(Mc, H, dtype=bf16, device=dev)
    gu_m = torch.empty(E, m_max, 2 * I, dtype=bf16, device=dev)
    ym = torch.empty(E, m_max, H, dtype=bf16, device=dev)
    masked_m = counts.to(torch.int32)

    def dg_gu_c():
        dg.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((ac_q, ac_s), (w1q, w1s), gu_c, m_indices)

    def dg_dn_c():
        dg.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((hc_q, hc_s), (w2q, w2s), yc, m_indices)

    def dg_gu_m():
        dg.m_grouped_gemm_fp8_fp8_bf16_nt_masked((am_q, am_s), (w1q, w1s), gu_m, masked_m, expected_m)

    def dg_dn_m():
        dg.m_grouped_gemm_fp8_fp8_bf16_nt_masked((hm_q, hm_s), (w2q, w2s), ym, masked_m, expected_m)

    # Correct first: every output on the experts' rows, each library against the other.
    for f in (hal_sw, hal_dn, dg_gu_c, dg_dn_c, dg_gu_m, dg_dn_m):
        f()
    torch.cuda.synchronize()

    def swiglu(gu):
        return (F.silu(gu[:, :I].float()) * gu[:, I:].float())

    errs = {"swiglu contiguous": _rel(swiglu(gu_c[dst_c]), h_out), "down contiguous": _rel(yc[dst_c], y_out),
            "swiglu masked": _rel(swiglu(gu_m.view(-1, 2 * I)[dst_m]), h_out),
            "down masked": _rel(ym.view(-1, H)[dst_m], y_out)}
    print(f"  T {T}: rows an expert {int(counts.min())}-{int(counts.max())} (mean {R / E:.1f}); DeepGEMM "
          f"contiguous {Mc} rows ({Mc / R:.2f}x), masked m_max {m_max}; halcyon {hal_sw.impl} / {hal_dn.impl}; "
          "relative error of DeepGEMM's outputs against halcyon's: "
          + ", ".join(f"{k} {v:.2e}" for k, v in errs.items()), flush=True)
    bad = [k for k, v in errs.items() if not v < 2e-2]
    if bad:
        sys.exit(f"DeepGEMM and halcyon disagree ({', '.join(bad)}): the inputs are not laid out alike")
    _state["calls"] = (hal_sw, hal_dn)

    f_sw, f_dn = 2.0 * R * 2 * I * H, 2.0 * R * H * I
    b_sw, b_dn = w1q.numel(), w2q.numel()
    return [(f"fp8 swiglu T{T}", "deepgemm contiguous", hal_sw, dg_gu_c, f_sw, b_sw),
            (f"fp8 swiglu T{T}", "deepgemm masked", hal_sw, dg_gu_m, f_sw, b_sw),
            (f"fp8 down T{T}", "deepgemm contiguous", hal_dn, dg_dn_c, f_dn, b_dn),
            (f"fp8 down T{T}", "deepgemm masked", hal_dn, dg_dn_m, f_dn, b_dn)]


def release():
    """Closes the current token count's prepared calls (the weights stay for the next)."""
    for c in _state.pop("calls", ()):
        c.close()
