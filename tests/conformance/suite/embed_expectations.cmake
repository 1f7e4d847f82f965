# cmake -DOUT=<file.cpp> -DROOT=<source dir> -DFILES=<a|b|...> -P embed_expectations.cmake
# Writes every backend's conformance expectations (backends/*/cts_expectations.txt) into a C++
# table (raw string literals), so that an installed `halcyon cts` knows them too.
include(${CMAKE_CURRENT_LIST_DIR}/../../../cmake/embed_text_rows.cmake)
embed_text_rows(rows "${ROOT}" "${FILES}" halcyon_cts "      ")
string(CONCAT body
  "// Generated from backends/*/cts_expectations.txt by tests/conformance/suite/embed_expectations.cmake.\n"
  "#include <halcyon/cts/cts.hpp>\nnamespace halcyon::cts {\n"
  "const std::vector<ExpectationText>& embedded_expectations() {\n"
  "  static const std::vector<ExpectationText> files = {\n${rows}  };\n  return files;\n}\n"
  "}  // namespace halcyon::cts\n")
write_if_changed(${OUT} "${body}")
