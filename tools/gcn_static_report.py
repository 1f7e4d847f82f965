#!/usr/bin/env python3
"""Static performance report of the hand-written GCN kernels (kernels/gcn), per kernel and
target, from their code objects alone (nothing here runs a kernel). The main loop is counted along its
common path (what forward unconditional branches jump over, such as the tail stage of a K loop,
is left out):

  registers (SGPR, VGPR, AGPR) and LDS from the code-object metadata; occupancy per CU (waves
  per SIMD from the unified 512-entry VGPR file in granules of 8, at most 8; workgroups per CU
  from 64 KiB of LDS); the main loop of each kernel (the backward branch holding the most MFMAs,
  else the most memory instructions) with its MFMA share of issue cycles; and, for the
  DeepSeek-V3 MoE layer on one MI300X (T = 4096 tokens, top-8 of 256 experts, H = 7168,
  I = 2048), bytes per FLOP and a predicted time against the same floors `halcyon bench moe`
  uses (bytes / bandwidth, FLOPs / peak), at 5.3 TB/s and 1307 TFLOP/s bf16; and the grouped
  GEMMs' workgroup order on MI300X's 8 XCDs (which XCD's L2 each expert weight tile lands in).

The prediction is a model, not a measurement: each wave runs its main loop's stages (one
s_barrier each) trip count times; a stage costs its issue cycles (VALU, VMEM, LDS: 4 cycles a
wave64 instruction; SALU and branches 1; s_nop N: N + 1; MFMA: its cycles from the ISA guide)
plus, when the loop waits on memory, an exposed latency (HBM ~1500 cycles, LDS ~64) shared
between the waves resident on a SIMD and divided by the loop's lookahead (2 when a vmcnt wait
leaves a later stage's loads in flight); 304 CUs x 4 SIMDs at 2.1 GHz. It ignores caches (beyond the floors' assumptions),
bank conflicts, co-issue of VALU with MFMA and dispatch. MI300X hardware must confirm it.

usage: tools/gcn_static_report.py <build>/kernels/gcn/co [--arch gfx942|gfx90a|all]
"""
import argparse
import os
import re
import subprocess
import sys

OBJDUMP = os.environ.get("LLVM_OBJDUMP", "llvm-objdump-19")
READELF = os.environ.get("LLVM_READELF", "llvm-readelf-19")
CUS, SIMDS, CLOCK = 304, 4, 2.1e9
PEAK_FLOPS, BANDWIDTH = 1307e12, 5.3e12
HBM_LATENCY, LDS_LATENCY = 1500, 64
MFMA_CYCLES = {"gfx942": {"32x32": 32, "16x16": 16}, "gfx90a": {"32x32": 64, "16x16": 32}}

# DeepSeek-V3 layer on one GPU, all 256 experts local, routing uniform: R = T*K rows.
T, K, E, H, I = 4096, 8, 256, 7168, 2048
R = T * K
B2 = 2


def metadata(co):
    out = subprocess.run([READELF, "--notes", co], capture_output=True, text=True, check=True).stdout
    get = lambda key: int(re.search(r"\." + key + r":\s+(\d+)", out).group(1))
    agpr = re.search(r"\.agpr_count:\s+(\d+)", out)
    return {"sgpr": get("sgpr_count"), "vgpr": get("vgpr_count"), "agpr": int(agpr.group(1)) if agpr else 0,
            "lds": get("group_segment_fixed_size"), "block": get("max_flat_workgroup_size")}


def instructions(co):
    out = subprocess.run([OBJDUMP, "-d", "--no-show-raw-insn", co], capture_output=True, text=True, check=True).stdout
    insts, start = [], None
    for line in out.splitlines():
        m = re.match(r"\s+([a-z][a-z0-9_]*)\s*(.*?)\s*//\s*([0-9A-Fa-f]+):", line)
        if not m:
            continue
        addr = int(m.group(3), 16)
        start = addr if start is None else start
        target = re.search(r"<[^+>]+\+0x([0-9a-f]+)>", line)
        insts.append((addr, m.group(1), m.group(2), start + int(target.group(1), 16) if target else None))
    return insts


def cost(mnemonic, operands, arch):
    if mnemonic.startswith("v_mfma"):
        return MFMA_CYCLES[arch]["32x32" if "32x32" in mnemonic else "16x16"]
    if mnemonic == "s_nop":
        return int(operands.split()[0], 0) + 1
    if mnemonic.startswith(("v_", "global_", "buffer_", "flat_", "ds_")):
        return 4
    return 1


def main_loop(insts, mfma_count=None):
    return common_path(loop_body(insts, mfma_count))


def loop_body(insts, mfma_count=None):
    """The loop (a backward branch) with the most MFMAs (mfma_count "fewest": the loop with the
    fewest MFMAs but at least one), else the most memory instructions."""
    best, best_key = None, None
    for i, (addr, mn, ops, target) in enumerate(insts):
        if target is None or target > addr or not mn.startswith(("s_branch", "s_cbranch")):
            continue
        body = [x for x in insts if target <= x[0] <= addr]
        mfma = sum(x[1].startswith("v_mfma") for x in body)
        if mfma_count == "fewest":
            if mfma == 0:
                continue
            mfma = -mfma
        key = (mfma, sum(x[1].startswith(("global_", "buffer_", "ds_", "s_load")) for x in body), -len(body))
        if best_key is None or key > best_key:
            best, best_key = body, key
    return best or []


def common_path(body):
    """The loop body without what its forward s_branch instructions jump over (the tail-stage
    or rarely taken alternatives laid out after the common path)."""
    skipped = set()
    for addr, mn, ops, target in body:
        if mn == "s_branch" and target is not None and target > addr:
            skipped.update(x[0] for x in body if addr < x[0] < target)
    return [x for x in body if x[0] not in skipped]


def occupancy(md):
    total = -(-(md["vgpr"] + md["agpr"]) // 8) * 8 if md["agpr"] else -(-md["vgpr"] // 8) * 8
    if md["agpr"]:
        total = -(-md["vgpr"] // 4) * 4 + md["agpr"]
        total = -(-total // 8) * 8
    per_simd = min(8, 512 // max(total, 8))
    waves_per_group = -(-md["block"] // 64)
    groups_by_waves = (per_simd * SIMDS) // waves_per_group
    groups = min(groups_by_waves, 65536 // md["lds"]) if md["lds"] else groups_by_waves
    return per_simd, groups * waves_per_group


# Per kernel at the DeepSeek-V3 shape: waves launched, main-loop trips per wave, the loop's
# exposed latency, and the stage's floor bytes / FLOPs (cmd_bench.cpp's formulas).
def shape(kernel):
    wgu, wd = H * 2 * I * B2, I * H * B2
    # grouped GEMM: 4 waves per 64 x 64 tile, column tiles padded to 8, row tiles per expert
    tiles = lambda n: 4 * (-(-(-(-n // 64)) // 8) * 8) * (R // 64 + E)
    if kernel == "halcyon_moe_gate_f32":
        return T, E // 8 * 3 + 8, LDS_LATENCY, T * E * 4 + E * 4 + R * 8, 0   # arg-max rounds
    if kernel == "halcyon_moe_permute_plan":
        return 8, R // 8 // 64 * 48, LDS_LATENCY, R * 4 * 3 + E * 8, 0       # 8 waves, ~48 experts a chunk
    if kernel == "halcyon_moe_permute_rows":
        return R * 4, -(-H // 256), HBM_LATENCY, T * H * B2 + R * H * B2, 0
    if kernel == "halcyon_moe_combine_bf16":
        return T * -(-H // 256) * 4, K, HBM_LATENCY, R * H * B2 + R * 8 + T * H * B2, 2 * R * H
    if kernel == "halcyon_moe_grouped_gemm_bf16:swiglu":
        return tiles(I), H // 32, HBM_LATENCY, E * wgu + R * H * B2 + R * I * B2, 2 * R * H * 2 * I   # K = 32 a stage
    if kernel == "halcyon_moe_grouped_gemm_bf16:down":
        return tiles(H), I // 32, HBM_LATENCY, E * wd + R * I * B2 + R * H * B2, 2 * R * I * H
    if kernel == "halcyon_gemm_bf16_tile":   # the router: [T, H] x [H, E]
        return (E // 32) * (T // 32), H // 8, HBM_LATENCY, T * H * B2 + H * E * B2 + T * E * 4, 2 * T * H * E
    return None


def pipeline(body):
    """(stages per loop iteration, lookahead) of a loop body: one s_barrier per stage (at least
    1); lookahead 2 when a vmcnt wait in the loop leaves loads in flight (a later stage's loads
    stay outstanding while an earlier one is consumed), else 1."""
    stages = max(1, sum(mn == "s_barrier" for _, mn, _, _ in body))
    partial = any(mn == "s_waitcnt" and re.search(r"vmcnt\(([1-9]\d*)\)", ops) for _, mn, ops, _ in body)
    return stages, 2 if partial else 1


def predict(kernel, body, arch, waves_per_cu):
    s = shape(kernel)
    if s is None:
        return None
    waves, trips, latency, nbytes, flops = s
    stages, lookahead = pipeline(body)
    issue = sum(cost(mn, ops, arch) for _, mn, ops, _ in body) / stages
    per_simd = max(1, min(waves_per_cu // SIMDS, -(-waves // (CUS * SIMDS))))
    # A SIMD with w waves finishes w stages every max(w * issue, (issue + latency) / lookahead)
    # cycles: a load issued `lookahead` stages before its use overlaps that many stages.
    cycles_per_round = max(per_simd * issue, (issue + latency) / lookahead)
    rounds = -(-waves // (CUS * SIMDS * per_simd)) * trips
    t_model = rounds * cycles_per_round / CLOCK
    floor = max(nbytes / BANDWIDTH, flops / PEAK_FLOPS)
    return nbytes, flops, floor, max(t_model, floor)


XCDS = 8


def xcd_order(n_cols, rows, weight_tile_bytes):
    """The grouped GEMM's workgroup order on MI300X's 8 XCDs, from the launcher's grid
    (ops/gcn/gcn_ops.cpp: x = column tiles padded to a multiple of 8, y = virtual row tiles) and
    the round-robin dispatch (linear id x + gx * y runs on XCD id % 8). Returns the grid, the
    XCDs that read each weight column tile (1 each when the order keeps a tile in one L2), the
    weight bytes each XCD's L2 holds per expert, and the same count for the transposed grid
    (row tiles fastest), which spreads every weight tile over all 8 XCDs."""
    gx = -(-n_cols // XCDS) * XCDS
    ids = lambda x, y, width: x + width * y
    chosen = {x: {ids(x, y, gx) % XCDS for y in range(rows)} for x in range(n_cols)}
    transposed = {x: {ids(y, x, rows) % XCDS for y in range(rows)} for x in range(n_cols)}
    per_xcd = [sum(1 for x in range(n_cols) if x % XCDS == k) * weight_tile_bytes for k in range(XCDS)]
    return gx, chosen, transposed, per_xcd


def print_xcd_order():
    print(f"\n## Workgroup order on MI300X's {XCDS} XCDs (grouped GEMMs, DeepSeek-V3 shape)\n")
    print("Dispatch is round-robin by linear workgroup id (x fastest); the launcher pads the column-tile "
          "count to a multiple of 8, so every row tile of column tile x (all experts) runs on XCD x % 8.\n")
    print("| GEMM | grid (x col tiles, y row tiles) | XCDs reading one weight tile | weight bytes per XCD L2, "
          "per expert (min-max) | transposed grid: XCDs per weight tile |")
    print("|---|---|---|---|---|")
    rows = R // 64 + E
    for label, n_cols, k in (("SwiGLU (N = 2I)", -(-I // 64), H), ("down (N = H)", -(-H // 64), I)):
        up = 2 if label.startswith("SwiGLU") else 1
        gx, chosen, transposed, per_xcd = xcd_order(n_cols, rows, 64 * k * B2 * up)
        one = {len(v) for v in chosen.values()}
        spread = {len(v) for v in transposed.values()}
        print(f"| {label} | {gx} x {rows} | {'/'.join(map(str, sorted(one)))} | "
              f"{min(per_xcd) / 1e6:.2f}-{max(per_xcd) / 1e6:.2f} MB | {'/'.join(map(str, sorted(spread)))} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("co_dir")
    ap.add_argument("--arch", default="all")
    a = ap.parse_args()
    archs = ["gfx942", "gfx90a"] if a.arch == "all" else [a.arch]
    files = sorted(f for f in os.listdir(a.co_dir) if f.endswith(".hsaco"))
    print("# Static report of the GCN kernels (tools/gcn_static_report.py)\n")
    print("| kernel | arch | SGPR | VGPR | AGPR | LDS | waves/SIMD | waves/CU | main loop: instructions, "
          "MFMA, MFMA share of issue cycles |")
    print("|---|---|---|---|---|---|---|---|---|")
    loops = {}
    for f in files:
        name, arch = f.rsplit(".", 2)[0], f.rsplit(".", 2)[1]
        if arch not in archs:
            continue
        co = os.path.join(a.co_dir, f)
        md = metadata(co)
        body = main_loop(instructions(co))
        per_simd, per_cu = occupancy(md)
        mfma = sum(x[1].startswith("v_mfma") for x in body)
        issue = sum(cost(mn, ops, arch) for _, mn, ops, _ in body)
        share = sum(cost(mn, ops, arch) for _, mn, ops, _ in body if mn.startswith("v_mfma")) / issue if issue else 0
        loops[(name, arch)] = (body, per_cu)
        if name == "halcyon_moe_grouped_gemm_bf16":   # its down loop: half the MFMAs, no up columns
            loops[(name + ":down", arch)] = (main_loop(instructions(co), "fewest"), per_cu)
        print(f"| {name} | {arch} | {md['sgpr']} | {md['vgpr']} | {md['agpr']} | {md['lds']} | {per_simd} | {per_cu} | "
              f"{len(body)}, {mfma}, {100 * share:.0f}% |")
    if "gfx942" not in archs:
        return 0
    print(f"\n## DeepSeek-V3 layer on one MI300X (T={T}, top-{K} of {E}, H={H}, I={I}; R={R} rows), model\n")
    print("| stage (kernel) | bytes (floor) | GFLOP | bytes/FLOP | floor us | predicted us | x floor |")
    print("|---|---|---|---|---|---|---|")
    stages = [("router (halcyon_gemm_bf16_tile)", "halcyon_gemm_bf16_tile", "halcyon_gemm_bf16_tile"),
              ("moe_gate", "halcyon_moe_gate_f32", "halcyon_moe_gate_f32"),
              ("moe_permute plan", "halcyon_moe_permute_plan", "halcyon_moe_permute_plan"),
              ("moe_permute rows", "halcyon_moe_permute_rows", "halcyon_moe_permute_rows"),
              ("SwiGLU GEMM", "halcyon_moe_grouped_gemm_bf16", "halcyon_moe_grouped_gemm_bf16:swiglu"),
              ("down GEMM", "halcyon_moe_grouped_gemm_bf16", "halcyon_moe_grouped_gemm_bf16:down"),
              ("moe_combine", "halcyon_moe_combine_bf16", "halcyon_moe_combine_bf16")]
    total_floor = total = 0
    for label, name, key in stages:
        if (name, "gfx942") not in loops:
            continue
        body, per_cu = loops.get((key, "gfx942"), loops[(name, "gfx942")])
        nbytes, flops, floor, t = predict(key, body, "gfx942", per_cu)
        total_floor += floor
        total += t
        bpf = f"{nbytes / flops:.4f}" if flops else "-"
        print(f"| {label} | {nbytes / 1e6:.1f} MB | {flops / 1e9:.1f} | {bpf} | {floor * 1e6:.1f} | {t * 1e6:.1f} | "
              f"{t / floor:.1f} |")
    print(f"| layer | | | | {total_floor * 1e6:.1f} | {total * 1e6:.1f} | {total / total_floor:.1f} |")
    print_xcd_order()
    return 0


if __name__ == "__main__":
    sys.exit(main())
