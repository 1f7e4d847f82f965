# Included by the -P scripts that embed text files into C++ tables (ops/src/embed_contracts.cmake,
# tests/conformance/suite/embed_expectations.cmake): one row per file of FILES ('|'-separated),
# `{"<path relative to root>", R"<delim>(<text>)<delim>"},`, indented by `indent`.
function(embed_text_rows out_var root files delim indent)
  set(rows "")
  string(REPLACE "|" ";" files "${files}")
  foreach(f IN LISTS files)
    if(f STREQUAL "")
      continue()
    endif()
    file(READ ${f} text)
    file(RELATIVE_PATH rel ${root} ${f})
    string(APPEND rows "${indent}{\"${rel}\", R\"${delim}(${text})${delim}\"},\n")
  endforeach()
  set(${out_var} "${rows}" PARENT_SCOPE)
endfunction()

# Writes `body` to `out` only when it changed (so that a reconfigure recompiles nothing).
function(write_if_changed out body)
  file(WRITE ${out}.tmp "${body}")
  file(COPY_FILE ${out}.tmp ${out} ONLY_IF_DIFFERENT)
endfunction()
