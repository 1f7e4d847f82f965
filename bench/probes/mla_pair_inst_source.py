#!/usr/bin/env python3
"""Writes an instrumented copy of kernels/ptx/attention/attention_mla_sm90_pair.cu ("sm90.pair"):
each consumer warpgroup's thread 0 adds up the clock64 cycles it spends in each mbarrier wait
(its tile's first and second copy group, the other warpgroup's maxima, the other's P), the
producer thread its waits for each of the four groups a pair; CTAs (0, 0, 0), (1, 0, 0),
(0, 31, 0) and (1, 63, 0) printf them (MLAPAIR lines). Probe only (printf and the clock reads
slow the kernel: the shares are what it tells, not the time):
    python3 bench/probes/mla_pair_inst_source.py kernels/ptx/attention/attention_mla_sm90_pair.cu
then rebuild the library and run it as bench/probes/mla_inst_run.sh says (it greps MLAINST and
MLAPAIR lines)."""
import sys

from source_edit import SourceEdit

edit = SourceEdit(sys.argv[1], "mla_pair_inst_source")
sub = edit.sub


def timed(stmt, k):
    return "{ const long long t0_ = clock64(); " + stmt + f" inst[{k}] += (unsigned)(clock64() - t0_); }}"


# Consumer counters: 0 first group, 1 second group, 2 maxpub, 3 ppub, 4 loop.
sub("  RowState st{neg_inf(), neg_inf(), 0.f, 0.f};  // m: the maxima O and l are scaled to\n",
    "  RowState st{neg_inf(), neg_inf(), 0.f, 0.f};  // m: the maxima O and l are scaled to\n"
    "  unsigned inst[5] = {};\n  const long long loop0_ = clock64();\n")
sub("    mbar_wait(maxpub(v), par);\n", "    " + timed("mbar_wait(maxpub(v), par);", 2) + "\n")
sub("mbar_wait(ppub(0), par);", timed("mbar_wait(ppub(0), par);", 3), 2)
sub("mbar_wait(ppub(1), par);", timed("mbar_wait(ppub(1), par);", 3))
# The copies' waits sit in queue_s (a group, or each block of it): 0 the first group, 1 the second.
sub("if (!PER_BLOCK) mbar_wait(full(w, gr, 0), par);", "if (!PER_BLOCK) " + timed("mbar_wait(full(w, gr, 0), par);", "gr == w ? 0 : 1"))
sub("if (PER_BLOCK) mbar_wait(full(w, gr, blk), par);", "if (PER_BLOCK) " + timed("mbar_wait(full(w, gr, blk), par);", "gr == w ? 0 : 1"))
sub("  // Row sums: the quad's, then the two warpgroups' (both on the final maxima).\n",
    "  inst[4] = (unsigned)(clock64() - loop0_);\n"
    "  if ((threadIdx.x & 127) == 0 && ((blockIdx.x == 0 && blockIdx.y == 0) || (blockIdx.x == 1 && blockIdx.y == 0) ||\n"
    "      (blockIdx.x == 0 && blockIdx.y == 31) || (blockIdx.x == 1 && blockIdx.y == 63)) && blockIdx.z == 0)\n"
    "    printf(\"MLAPAIR cta %d %d wg %d tiles %d first %u second %u maxpub %u ppub %u loop %u\\n\", blockIdx.x,\n"
    "           blockIdx.y, w, n, inst[0], inst[1], inst[2], inst[3], inst[4]);\n"
    "  // Row sums: the quad's, then the two warpgroups' (both on the final maxima).\n")
# Producer: cycles waiting for each group (k: slot 0 own, slot 0 other, slot 1 other, slot 1 own).
sub("      uint64_t policy;  // as sm90.ws.tma (measured there on the H200)\n",
    "      uint64_t policy;  // as sm90.ws.tma (measured there on the H200)\n"
    "      unsigned inst[4] = {};\n      const long long p0_ = clock64();\n")
sub("          if (j > 0) mbar_wait(empty(s, g), (j - 1) & 1);\n",
    "          if (j > 0) " + timed("mbar_wait(empty(s, g), (j - 1) & 1);", "k") + "\n")
sub("        }\n      }\n    }\n    asm volatile(\"cp.async.wait_all;\\n\" ::: \"memory\");\n    return;\n",
    "        }\n      }\n"
    "      if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)\n"
    "        printf(\"MLAPAIR cta 0 0 producer s0own %u s0other %u s1other %u s1own %u loop %u\\n\", inst[0], inst[1],\n"
    "               inst[2], inst[3], (unsigned)(clock64() - p0_));\n"
    "    }\n    asm volatile(\"cp.async.wait_all;\\n\" ::: \"memory\");\n    return;\n")
edit.write()
