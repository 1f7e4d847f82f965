# cmake -DOUT=<file.cpp> -DROOT=<kernels dir> -DFILES=<a|b|...> -P embed_contracts.cmake
# Writes the contract texts into a C++ table (raw string literals).
set(body "// Generated from kernels/**/*.contract by runtime/src/embed_contracts.cmake.\n")
string(APPEND body "#include <string_view>\nstruct EmbeddedContract { const char* file; std::string_view text; };\n")
string(APPEND body "extern const EmbeddedContract kEmbeddedContracts[] = {\n")
string(REPLACE "|" ";" FILES "${FILES}")
foreach(f IN LISTS FILES)
  file(READ ${f} text)
  file(RELATIVE_PATH rel ${ROOT} ${f})
  string(APPEND body "  {\"${rel}\", R\"halcyon_contract(${text})halcyon_contract\"},\n")
endforeach()
string(APPEND body "  {nullptr, {}}};\n")
file(WRITE ${OUT}.tmp "${body}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
