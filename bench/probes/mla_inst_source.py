#!/usr/bin/env python3
"""Writes an instrumented copy of kernels/ptx/attention/attention_mla_sm90_ws.cu: each consumer
warpgroup's thread 0 adds up the clock64 cycles it spends in each wait (its tile's copy, the other
warpgroup's maxima and P, its own wgmma groups), counts the tiles taken S-first, and the
producer thread counts its waits for free stages; CTAs (0, 0, 0), (1, 0, 0), (0, 31, 0) and (1, 63, 0) printf
them at the end. Probe only (device printf and clock reads slow the kernel: the shares of the
waits are what it tells, not the time):
    python3 bench/probes/mla_inst_source.py kernels/ptx/attention/attention_mla_sm90_ws.cu
then rebuild the library and run it (bench/probes/mla_inst_run.sh)."""
import sys

from source_edit import SourceEdit

edit = SourceEdit(sys.argv[1], "mla_inst_source")
sub = edit.sub

T = "const long long t0_ = clock64(); {s} inst[{k}] += (unsigned)(clock64() - t0_);"
# Consumer counters: 0 full, 1 maxpub, 2 ppub, 3 S wgmma, 4 theirs wgmma, 5 own wgmma, 6 S-first tiles, 7 loop.
sub("  RowState st{neg_inf(), neg_inf(), 0.f, 0.f};  // m: the maxima O and l are scaled to\n",
    "  RowState st{neg_inf(), neg_inf(), 0.f, 0.f};  // m: the maxima O and l are scaled to\n"
    "  unsigned inst[8] = {};\n  const long long loop0_ = clock64();\n")
sub("    mbar_wait(maxpub(1 - w), (u >> 1) & 1);\n", "    { " + T.format(s="mbar_wait(maxpub(1 - w), (u >> 1) & 1);", k=1) + " }\n")
sub("    mbar_wait(ppub(1 - w), (u >> 1) & 1);\n", "    { " + T.format(s="mbar_wait(ppub(1 - w), (u >> 1) & 1);", k=2) + " }\n")
sub("    mbar_wait(full(w), par);\n", "    { " + T.format(s="mbar_wait(full(w), par);", k=0) + " }\n")
sub("      queue_s(par, t);\n      wgmma_wait<0>();\n      keep<32>(&s[0][0]);\n      if (t >= 1)",
    "      queue_s(par, t);\n      { " + T.format(s="wgmma_wait<0>();", k=3) + " }\n      ++inst[6];\n"
    "      keep<32>(&s[0][0]);\n      if (t >= 1)")
sub("      queue_s(par, t);\n      wgmma_wait<0>();\n      keep<32>(&s[0][0]);\n    }",
    "      queue_s(par, t);\n      { " + T.format(s="wgmma_wait<0>();", k=3) + " }\n      keep<32>(&s[0][0]);\n    }")
sub("      queue_theirs(t - 1);\n      wgmma_wait<0>();\n      release_theirs();\n",
    "      queue_theirs(t - 1);\n      { " + T.format(s="wgmma_wait<0>();", k=4) + " }\n      release_theirs();\n", 3)
sub("    wgmma_commit();\n    wgmma_wait<0>();\n    keep<128>(&o[0][0]);\n    if (PST || lane == 0) mbar_arrive(empty(w));\n",
    "    wgmma_commit();\n    { " + T.format(s="wgmma_wait<0>();", k=5) + " }\n    keep<128>(&o[0][0]);\n"
    "    if (PST || lane == 0) mbar_arrive(empty(w));\n")
sub("  // Row sums: the quad's, then the two warpgroups'",
    "  inst[7] = (unsigned)(clock64() - loop0_);\n"
    "  if ((threadIdx.x & 127) == 0 && ((blockIdx.x == 0 && blockIdx.y == 0) || (blockIdx.x == 1 && blockIdx.y == 0) ||\n"
    "      (blockIdx.x == 0 && blockIdx.y == 31) || (blockIdx.x == 1 && blockIdx.y == 63)) && blockIdx.z == 0)\n"
    "    printf(\"MLAINST cta %d %d wg %d tiles %d full %u maxpub %u ppub %u s_wg %u theirs_wg %u own_wg %u sfirst %u loop %u\\n\",\n"
    "           blockIdx.x, blockIdx.y, w, n, inst[0], inst[1], inst[2], inst[3], inst[4], inst[5], inst[6], inst[7]);\n"
    "  // Row sums: the quad's, then the two warpgroups'")
# Producer: cycles waiting for free stages (TMA build).
sub("        if (t >= 2) mbar_wait(empty(s), ((t >> 1) - 1) & 1);\n        const int row",
    "        if (t >= 2) { " + T.format(s="mbar_wait(empty(s), ((t >> 1) - 1) & 1);", k=0) + " }\n        const int row")
sub("      uint64_t policy;\n", "      uint64_t policy;\n      unsigned inst[1] = {};\n      const long long p0_ = clock64();\n")
sub("        for (int b = 0; b < kMlaQk / 64; ++b) tma_2d(skv + s * kMwsTile + b * kMwsBlk, tkv, b * 64, row, full(s), policy);\n      }\n",
    "        for (int b = 0; b < kMlaQk / 64; ++b) tma_2d(skv + s * kMwsTile + b * kMwsBlk, tkv, b * 64, row, full(s), policy);\n      }\n"
    "      if ((blockIdx.x == 0 && blockIdx.y == 0) && blockIdx.z == 0)\n"
    "        printf(\"MLAINST cta %d %d producer empty %u loop %u\\n\", blockIdx.x, blockIdx.y, inst[0], (unsigned)(clock64() - p0_));\n")
edit.write()
