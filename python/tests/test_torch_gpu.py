"""halcyon's Python module on a CUDA GPU with PyTorch tensors (the GPU machine; CI has neither):
zero copy (halcyon computes into the torch tensor's own memory: its data_ptr is the address
halcyon used, and nothing is copied back), and results that match torch's.

    HALCYON_LIBRARY=build-gpu/lib/libhalcyon_runtime.so python3 python/tests/test_torch_gpu.py
(scripts/gpu_check.sh --python runs it after building.)
"""
import os
import sys

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

# Errors: a non-contiguous tensor, and one on the CPU for a CUDA call.
expect_error(lambda: halcyon.run("row_softmax", x=x.t(), y=y.t()), "not contiguous", "a transposed tensor")
expect_error(lambda: halcyon.run("vector_add", a=a, b=b.cpu(), c=c), "tensor 'b' is on cpu:0, the call's device is cuda:0",
             "a CPU tensor in a CUDA call")

finish()
