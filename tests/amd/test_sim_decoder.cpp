// The decoder wrapper: LLVM's disassembler output turned into operands and modifiers.
#include <doctest/doctest.h>

#include "decoder.hpp"

using namespace halcyon::amdsim;

TEST_CASE("operand text is parsed into registers, immediates and modifiers") {
  Inst in;
  REQUIRE(parse_operands("global_load_dword v3, v2, s[4:5] offset:16 sc0", &in) == "");
  CHECK(in.op == "global_load_dword");
  REQUIRE(in.ops.size() == 3);
  CHECK((in.ops[0].kind == OpKind::Vgpr && in.ops[0].index == 3 && in.ops[0].count == 1));
  CHECK((in.ops[2].kind == OpKind::Sgpr && in.ops[2].index == 4 && in.ops[2].count == 2));
  CHECK(in.mods.offset == 16);

  Inst f;
  REQUIRE(parse_operands("v_add_f32_e64 v1, -|v2|, 0.5 clamp mul:2", &f) == "");
  CHECK(f.op == "v_add_f32");
  CHECK((f.ops[1].neg && f.ops[1].abs));
  CHECK((f.ops[2].kind == OpKind::Imm && f.ops[2].is_float && f.ops[2].imm32() == 0x3f000000u));
  CHECK(f.ops[2].imm16() == 0x3800);
  CHECK((f.mods.clamp && f.mods.omod == 2.0f));

  Inst p;
  REQUIRE(parse_operands("v_pk_fma_f16 v0, v1, v2, v3 op_sel:[1,0,0] op_sel_hi:[0,1,1]", &p) == "");
  CHECK(p.mods.op_sel == 1);
  CHECK(p.mods.op_sel_hi == 6);

  Inst m;
  REQUIRE(parse_operands("v_mfma_f32_32x32x8_bf16 a[0:15], v[6:7], v[12:13], a[0:15]", &m) == "");
  CHECK((m.ops[0].kind == OpKind::Agpr && m.ops[0].count == 16));

  Inst d;
  REQUIRE(parse_operands("ds_write2_b32 v1, v2, v3 offset0:1 offset1:2", &d) == "");
  CHECK((d.mods.offset0 == 1 && d.mods.offset1 == 2 && d.ops.size() == 3));

  Inst v;
  REQUIRE(parse_operands("v_cndmask_b32_e64 v0, 0, -1, s[4:5]", &v) == "");
  CHECK((v.ops[2].kind == OpKind::Imm && v.ops[2].imm32() == 0xffffffffu && v.ops[2].imm64() == ~0ull));

  Inst lds;
  REQUIRE(parse_operands("buffer_load_dword v1, s[4:7], 0 offen offset:16 lds", &lds) == "");
  CHECK((lds.mods.lds && lds.mods.offen && lds.mods.offset == 16 && lds.ops.size() == 3));
  // DPP: the _dpp suffix goes, the controls become dpp_ctrl as the ISA encodes it.
  struct DppCase {
    const char* text;
    uint16_t ctrl;
    uint8_t row_mask, bank_mask;
    bool bound_ctrl;
  };
  const DppCase dpp_cases[] = {
      {"v_mov_b32_dpp v0, v1 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf", 0xb1, 0xf, 0xf, false},
      {"v_add_f32_dpp v0, v1, v2 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1", 0x111, 0xf, 0xf, true},
      {"v_max_f32_dpp v0, v1, v2 row_bcast:15 row_mask:0xa bank_mask:0xf", 0x142, 0xa, 0xf, false},
      {"v_max_f32_dpp v0, v1, v2 row_bcast:31 row_mask:0xc bank_mask:0x3", 0x143, 0xc, 0x3, false},
      {"v_mov_b32_dpp v0, v1 wave_shr:1 row_mask:0xf bank_mask:0xf", 0x138, 0xf, 0xf, false},
      {"v_mov_b32_dpp v0, v1 wave_ror:1 row_mask:0xf bank_mask:0xf", 0x13c, 0xf, 0xf, false},
      {"v_mov_b32_dpp v0, v1 row_half_mirror row_mask:0xf bank_mask:0xf", 0x141, 0xf, 0xf, false},
  };
  for (const DppCase& c : dpp_cases) {
    CAPTURE(c.text);
    Inst dpp;
    REQUIRE(parse_operands(c.text, &dpp) == "");
    CHECK((dpp.mods.dpp && dpp.mods.dpp_ctrl == c.ctrl && dpp.mods.row_mask == c.row_mask &&
           dpp.mods.bank_mask == c.bank_mask && dpp.mods.bound_ctrl == c.bound_ctrl));
    CHECK(dpp.op.find("_dpp") == std::string::npos);
  }
  Inst sdwa;
  CHECK(parse_operands("v_mov_b32_sdwa v0, v1 dst_sel:WORD_1", &sdwa).find("SDWA") != std::string::npos);
}

TEST_CASE("LLVM decodes gfx942 machine code into the expected instructions") {
  Decoder dec("gfx942");
  // Words taken from `llvm-objdump -d` of a clang-compiled kernel.
  const uint32_t words[] = {0x02040F06u, 0xDC508000u, 0x067F0004u, 0xBF810000u};
  const auto* bytes = reinterpret_cast<const unsigned char*>(words);
  Inst a = dec.decode(bytes, sizeof words, 0x100);
  CHECK(a.error == "");
  CHECK(a.text == "v_add_f32_e32 v2, v6, v7");
  CHECK(a.size == 4);
  Inst b = dec.decode(bytes + 4, sizeof words - 4, 0x104);
  CHECK(b.text == "global_load_dword v6, v[4:5], off");
  CHECK(b.size == 8);
  CHECK((b.ops[2].kind == OpKind::Off));
  Inst c = dec.decode(bytes + 12, 4, 0x10c);
  CHECK(c.op == "s_endpgm");
  const uint32_t junk = 0xffffffffu;
  Inst j = dec.decode(reinterpret_cast<const unsigned char*>(&junk), 4, 0x200);
  CHECK(j.error != "");
}
