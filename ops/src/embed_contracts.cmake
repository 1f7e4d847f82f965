# cmake -DOUT=<file.cpp> -DROOT=<kernels dir> -DFILES=<a|b|...> -P embed_contracts.cmake
# Writes the contract texts into a C++ table (raw string literals).
include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/embed_text_rows.cmake)
embed_text_rows(rows "${ROOT}" "${FILES}" halcyon_contract "  ")
string(CONCAT body
  "// Generated from kernels/**/*.contract by ops/src/embed_contracts.cmake.\n"
  "#include <string_view>\nstruct EmbeddedContract { const char* file; std::string_view text; };\n"
  "extern const EmbeddedContract kEmbeddedContracts[] = {\n${rows}  {nullptr, {}}};\n")
write_if_changed(${OUT} "${body}")
