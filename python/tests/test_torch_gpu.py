"""halcyon's Python module on a CUDA GPU with PyTorch tensors (the GPU machine; CI has neither):
zero copy (halcyon computes into the torch tensor's own memory: its data_ptr is the address
halcyon used, and nothing is copied back), and results that match torch's.

    HALCYON_LIBRARY=build-gpu/lib/libhalcyon_runtime.so python3 python/tests/test_torch_gpu.py
(scripts/gpu_check.sh --python runs it after building.)
"""
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import halcyon  # noqa: E402
from checks import check, expect_error, finish  # noqa: E402

dev = torch.device("cuda:0")
torch.manual_seed(21)

# Zero copy: the hal buffer halcyon wraps around c is c's own memory (same data pointer), and
# the result appears in c with no copy back.
a = torch.randn(1 << 20, device=dev)
b = torch.randn_like(a)
c = torch.zeros_like(a)
ptr_before = c.data_ptr()
check(halcyon.device_address(c) == c.data_ptr(), f"zero copy: halcyon's buffer for c is at c.data_ptr() "
                                                 f"(0x{c.data_ptr():x})")
halcyon.run("vector_add", a=a, b=b, c=c)
check(c.data_ptr() == ptr_before, "c kept its storage")
check(torch.equal(c, a + b), "vector_add on torch CUDA tensors matches a + b")

# Export: halcyon memory viewed by torch without a copy (same pointer both ways).
e = halcyon.empty((4096,), "f32", "cuda:0")
t = torch.from_dlpack(e)
check(t.device == dev and t.shape == (4096,), "halcyon.empty -> torch.from_dlpack on cuda:0")
check(t.data_ptr() == halcyon.device_address(e), "torch's view of halcyon memory is that memory (same pointer)")
t.copy_(a[:4096])
d = torch.empty_like(t)
halcyon.run("vector_add", a=t, b=t, c=d)
check(torch.equal(d, 2 * a[:4096]), "an exported halcyon buffer used by torch and re-imported")

# row_softmax against torch.softmax.
x = torch.randn(257, 1000, device=dev) * 5
y = torch.empty_like(x)
halcyon.run("row_softmax", x=x, y=y)
check(torch.allclose(y, torch.softmax(x, dim=-1), rtol=1e-5, atol=1e-7), "row_softmax matches torch.softmax")

# The MoE layer (DeepSeek-V3 routing, scaled down) against torch.
T, H, I, E, K, G, TG = 512, 1024, 256, 64, 8, 8, 4
bf = torch.bfloat16
xs = torch.randn(T, H, device=dev, dtype=bf)
wr = (torch.randn(H, E, device=dev) * H ** -0.5).to(bf)
wgu = (torch.randn(E, H, 2 * I, device=dev) * 0.02).to(bf)
wd = (torch.randn(E, I, H, device=dev) * 0.02).to(bf)
bias = torch.randn(E, device=dev) * 0.01
out = halcyon.moe_layer(xs, wr, wgu, wd, bias=bias, topk=K, n_groups=G, topk_groups=TG)

s = (xs.float() @ wr.float()).sigmoid()
sel = s + bias
gs = sel.view(T, G, E // G).topk(2, dim=-1).values.sum(-1)
keep = torch.zeros_like(gs).scatter_(1, gs.topk(TG, dim=-1).indices, 1.0)
sel = sel.masked_fill(keep.repeat_interleave(E // G, dim=1) == 0, float("-inf"))
ids = sel.topk(K, dim=-1).indices
w = s.gather(1, ids)
w = w / w.sum(-1, keepdim=True) * 2.5
ref = torch.zeros(T, H, device=dev)
for k in range(E):
    rows, slot = (ids == k).nonzero(as_tuple=True)
    if rows.numel():
        h = xs[rows].float() @ wgu[k].float()
        act = (F.silu(h[:, :I]) * h[:, I:]).to(bf).float()
        ref.index_add_(0, rows, w[rows, slot, None] * (act @ wd[k].float()))
# Per token: a token whose top-k differs at a near tie of two scores (accumulation order) is
# not an error of either side; all but 1% of tokens must match to bf16 accuracy.
row_err = (out.float() - ref).norm(dim=1) / ref.norm(dim=1)
close = (row_err < 2e-2).float().mean().item()
check(out.data_ptr() != xs.data_ptr() and out.dtype == bf and out.is_cuda, "moe_layer allocated out like x")
check(close >= 0.99, f"moe_layer matches torch on {close:.1%} of {T} tokens (median relative error "
                     f"{row_err.median().item():.2e})")

# The FP8 layer (MoeLayer with fp8=): the same experts as e4m3 with 128 x 128 block scales
# (torch.float8_e4m3fn), on the weights they stand for. Activations are quantized per 1 x 128
# group on the FP8 path (3 mantissa bits), hence the wider per-token bound.
def blocks(w):  # [e, n, k] -> e4m3 [e, n, k], scales [e, n/128, k/128]
    e, n, k = w.shape
    b = w.float().view(e, n // 128, 128, k // 128, 128)
    sc = b.abs().amax(dim=(2, 4), keepdim=True).clamp(min=1e-12) / 448.0
    return (b / sc).to(torch.float8_e4m3fn).view(e, n, k), sc.view(e, n // 128, k // 128).contiguous()


w1q, w1s = blocks(wgu.transpose(1, 2).contiguous())  # [E, 2I, H]: gate rows first
w2q, w2s = blocks(wd.transpose(1, 2).contiguous())  # [E, H, I]
layer = halcyon.MoeLayer(wr, bias=bias, topk=K, n_groups=G, topk_groups=TG,
                         fp8=dict(w_gate_up=w1q, w_gate_up_scale=w1s, w_down=w2q, w_down_scale=w2s))
check(layer.fp8_experts, "MoeLayer with FP8 weights runs FP8 experts on cuda:0")
deq = lambda q, sc: (q.float().view(E, q.shape[1] // 128, 128, q.shape[2] // 128, 128) *  # noqa: E731
                     sc.view(E, q.shape[1] // 128, 1, q.shape[2] // 128, 1)).view(q.shape)
wgu8, wd8 = deq(w1q, w1s).transpose(1, 2), deq(w2q, w2s).transpose(1, 2)
ref8 = torch.zeros(T, H, device=dev)
for k in range(E):
    rows, slot = (ids == k).nonzero(as_tuple=True)
    if rows.numel():
        h = xs[rows].float() @ wgu8[k]
        ref8.index_add_(0, rows, w[rows, slot, None] * ((F.silu(h[:, :I]) * h[:, I:]) @ wd8[k]))
out8 = layer(xs)
row_err8 = (out8.float() - ref8).norm(dim=1) / ref8.norm(dim=1)
close8 = (row_err8 < 8e-2).float().mean().item()
check(close8 >= 0.99, f"FP8 MoeLayer matches torch on the weights it stands for on {close8:.1%} of {T} tokens "
                      f"(median relative error {row_err8.median().item():.2e})")
layer.close()

# Stream order: a call on torch CUDA tensors is queued on torch's current stream and returns
# without waiting, as a torch operator does. torch.cuda._sleep keeps the stream busy for about
# half a second ahead of the call's input; the call must come back long before that, and torch's
# next operator on the stream must see its result. On the default stream (the legacy one, 0)
# and on a side stream; then the FP8 MoeLayer the same way.
n = 1 << 22
a1 = torch.randn(n, device=dev)
b1 = torch.randn_like(a1)
c1 = torch.empty_like(a1)
halcyon.run("vector_add", a=a1, b=b1, c=c1)  # its module loaded before the timing below
torch.cuda.synchronize()
for label, stream in (("the default stream", torch.cuda.default_stream(dev)), ("a side stream", torch.cuda.Stream(dev))):
    with torch.cuda.stream(stream):
        c1.zero_()
        torch.cuda._sleep(int(1e9))  # clock cycles: ~0.5 s
        a2 = a1 * 2
        t0 = time.perf_counter()
        halcyon.run("vector_add", a=a2, b=b1, c=c1)
        dt = time.perf_counter() - t0
        busy = not stream.query()
        d1 = c1 + 1
    torch.cuda.synchronize()
    check(busy and dt < 0.2, f"on {label}, halcyon.run returned after {dt * 1e3:.1f} ms while torch's stream was "
                             f"still busy (no host wait)")
    check(torch.equal(d1, a1 * 2 + b1 + 1), f"on {label}, torch's next operator saw halcyon's result (stream order)")
layer = halcyon.MoeLayer(wr, bias=bias, topk=K, n_groups=G, topk_groups=TG,
                         fp8=dict(w_gate_up=w1q, w_gate_up_scale=w1s, w_down=w2q, w_down_scale=w2s))
side = torch.cuda.Stream(dev)
side.wait_stream(torch.cuda.current_stream(dev))
with torch.cuda.stream(side):
    torch.cuda._sleep(int(1e9))
    x2 = xs * 1  # written after the sleep
    t0 = time.perf_counter()
    out9 = layer(x2)
    dt = time.perf_counter() - t0
    busy = not side.query()
torch.cuda.synchronize()
check(busy and dt < 0.2, f"MoeLayer on a side stream returned after {dt * 1e3:.1f} ms while the stream was still "
                         f"busy (no host wait)")
close9 = ((out9.float() - ref8).norm(dim=1) / ref8.norm(dim=1) < 8e-2).float().mean().item()
check(close9 >= 0.99, f"MoeLayer on a side stream, queued behind torch's work, matches torch on {close9:.1%} of tokens")
layer.close()

# A prepared paged decode (halcyon.prepare): run on torch's stream, then again after the block
# table and the lengths are rewritten in place (the next decode step), each time equal bit for
# bit to halcyon.run on the same tensors; and without a host wait, as halcyon.run.
Bd, Hq, Hkv, D, BS, MB = 8, 16, 2, 128, 64, 12
NB = Bd * MB
qd = torch.randn(Bd, 1, Hq, D, dtype=bf, device=dev)
kc, vc = (torch.randn(NB, BS, Hkv, D, dtype=bf, device=dev) for _ in range(2))
table = torch.randperm(NB, device=dev).to(torch.int32).reshape(Bd, MB).contiguous()
lens = torch.randint(1, MB * BS + 1, (Bd,), dtype=torch.int32, device=dev)
outp, lsep = torch.empty(Bd, 1, Hq, D, dtype=bf, device=dev), torch.empty(Bd, 1, Hq, dtype=torch.float32, device=dev)
outr, lser = torch.empty_like(outp), torch.empty_like(lsep)
step = halcyon.prepare("attention_decode", q=qd, k_cache=kc, v_cache=vc, block_table=table, seq_lens=lens, out=outp,
                       lse=lsep, scale=0.0)
for k in range(2):
    if k == 1:
        table.copy_(torch.randperm(NB, device=dev).to(torch.int32).reshape(Bd, MB))
        lens.copy_(torch.randint(1, MB * BS + 1, (Bd,), dtype=torch.int32, device=dev))
    step()
    halcyon.run("attention_decode", q=qd, k_cache=kc, v_cache=vc, block_table=table, seq_lens=lens, out=outr, lse=lser,
                scale=0.0)
    torch.cuda.synchronize()
    check(torch.equal(outp, outr) and torch.equal(lsep, lser),
          f"prepared attention_decode ({step.impl}), step {k}: equal to halcyon.run on the tensors' current contents")
side = torch.cuda.Stream(dev)
side.wait_stream(torch.cuda.current_stream(dev))
with torch.cuda.stream(side):
    torch.cuda._sleep(int(1e9))
    t0 = time.perf_counter()
    step()
    dt = time.perf_counter() - t0
    busy = not side.query()
torch.cuda.synchronize()
check(busy and dt < 0.2, f"a prepared call on a side stream returned after {dt * 1e3:.1f} ms while the stream was "
                         f"still busy (no host wait)")
check(torch.equal(outp, outr), "the prepared call queued on the side stream wrote the same result")
step.close()

# Implementations by name (impl=): every decode kernel the device can run, prepared by name, writes
# what the registry's choice wrote (to the contract's tolerance: the key splits differ); a name
# that cannot run here (the CPU's "host") is refused with the list.
for name in ("sm80", "sm80.ksplit", "sm90.tma", "sm90.tma.k128"):
    outn, lsen = torch.empty_like(outp), torch.empty_like(lsep)
    by_name = halcyon.prepare("attention_decode", q=qd, k_cache=kc, v_cache=vc, block_table=table, seq_lens=lens,
                              out=outn, lse=lsen, scale=0.0, impl=name)
    by_name()
    torch.cuda.synchronize()
    err = ((outn.float() - outr.float()).norm() / outr.float().norm()).item()
    check(by_name.impl == name and err < 2e-2, f"attention_decode prepared as {by_name.impl}: rel err {err:.2e} against "
                                               f"the registry's choice")
    by_name.close()
expect_error(lambda: halcyon.run("vector_add", a=a, b=b, c=c, impl="host"), "'host' cannot run on cuda:0",
             "impl='host' on a CUDA device")

# Errors: a non-contiguous tensor, and one on the CPU for a CUDA call.
expect_error(lambda: halcyon.run("row_softmax", x=x.t(), y=y.t()), "not contiguous", "a transposed tensor")
expect_error(lambda: halcyon.run("vector_add", a=a, b=b.cpu(), c=c), "tensor 'b' is on cpu:0, the call's device is cuda:0",
             "a CPU tensor in a CUDA call")

finish()
