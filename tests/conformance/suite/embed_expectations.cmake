# cmake -DOUT=<file.cpp> -DROOT=<source dir> -DFILES=<a|b|...> -P embed_expectations.cmake
# Writes every backend's conformance expectations (backends/*/cts_expectations.txt) into a C++
# table (raw string literals), so that an installed `halcyon cts` knows them too.
set(body "// Generated from backends/*/cts_expectations.txt by tests/conformance/suite/embed_expectations.cmake.\n")
string(APPEND body "#include <halcyon/cts/cts.hpp>\nnamespace halcyon::cts {\n")
string(APPEND body "const std::vector<ExpectationText>& embedded_expectations() {\n")
string(APPEND body "  static const std::vector<ExpectationText> files = {\n")
string(REPLACE "|" ";" FILES "${FILES}")
foreach(f IN LISTS FILES)
  if(f STREQUAL "")
    continue()
  endif()
  file(READ ${f} text)
  file(RELATIVE_PATH rel ${ROOT} ${f})
  string(APPEND body "      {\"${rel}\", R\"halcyon_cts(${text})halcyon_cts\"},\n")
endforeach()
string(APPEND body "  };\n  return files;\n}\n}  // namespace halcyon::cts\n")
file(WRITE ${OUT}.tmp "${body}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
