# Fails when an #include points up the layers (docs/architecture.md):
#   tools -> runtime -> ops -> {kernels, hal};  backends -> hal;  kernels -> hal only.
# No backend includes another's files (backends/amd_common and backends/comm_common, code
# shared by several backends, are the exceptions).
#   cmake -DROOT=<source dir> -P check_layering.cmake
if(NOT ROOT)
  message(FATAL_ERROR "check_layering: pass -DROOT=<source dir>")
endif()

# Which top folder owns an include path written with <...>.
function(owner_of_angle path out)
  set(o "")
  if(path MATCHES "^halcyon/(hal\\.h|halcyon\\.hpp|result\\.hpp|plugin\\.hpp|tensor_map\\.hpp)$")
    set(o hal)
  elseif(path MATCHES "^halcyon/ops/")
    set(o ops)
  elseif(path MATCHES "^halcyon/runtime(/|\\.h$)")
    set(o runtime)
  elseif(path MATCHES "^halcyon/(kernels/|ptx_kernels\\.hpp|gcn/)")
    set(o kernels)
  elseif(path MATCHES "^halcyon/cts/")
    set(o tests)
  endif()
  set(${out} "${o}" PARENT_SCOPE)
endfunction()

set(allowed_hal hal)
set(allowed_kernels kernels hal)
set(allowed_backends backends hal)
set(allowed_ops ops kernels hal)
set(allowed_runtime runtime ops kernels hal)
# tools links the conformance suite (tests/conformance/suite) for `halcyon cts`.
set(allowed_tools tools runtime ops kernels hal tests)

file(GLOB_RECURSE sources RELATIVE ${ROOT}
  ${ROOT}/hal/*.h ${ROOT}/hal/*.hpp ${ROOT}/hal/*.cpp ${ROOT}/hal/*.c
  ${ROOT}/backends/*.hpp ${ROOT}/backends/*.cpp ${ROOT}/backends/*.h
  ${ROOT}/kernels/*.hpp ${ROOT}/kernels/*.cpp ${ROOT}/kernels/*.cu ${ROOT}/kernels/*.cuh
  ${ROOT}/ops/*.hpp ${ROOT}/ops/*.cpp
  ${ROOT}/runtime/*.h ${ROOT}/runtime/*.hpp ${ROOT}/runtime/*.cpp
  ${ROOT}/tools/*.hpp ${ROOT}/tools/*.cpp)
set(violations "")
set(checked 0)
foreach(rel IN LISTS sources)
  string(REGEX MATCH "^[^/]+" layer "${rel}")
  get_filename_component(dir "${rel}" DIRECTORY)
  string(REGEX MATCH "^backends/[^/]+" own_backend "${rel}")
  file(STRINGS ${ROOT}/${rel} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
  foreach(line IN LISTS lines)
    math(EXPR checked "${checked} + 1")
    set(target_owner "")
    set(target_path "")
    if(line MATCHES "#[ \t]*include[ \t]*<([^>]+)>")
      owner_of_angle("${CMAKE_MATCH_1}" target_owner)
      set(inc "${CMAKE_MATCH_1}")
    elseif(line MATCHES "#[ \t]*include[ \t]*\"([^\"]+)\"")
      set(inc "${CMAKE_MATCH_1}")
      get_filename_component(abs "${ROOT}/${dir}/${inc}" ABSOLUTE)
      if(EXISTS "${abs}")
        file(RELATIVE_PATH target_path ${ROOT} ${abs})
      else()
        # Found through an include directory: the file of that name in the tree.
        get_filename_component(base "${inc}" NAME)
        file(GLOB_RECURSE found RELATIVE ${ROOT} ${ROOT}/backends/*/${base} ${ROOT}/hal/*/${base}
             ${ROOT}/kernels/*/${base} ${ROOT}/ops/*/${base} ${ROOT}/runtime/*/${base} ${ROOT}/tools/${base})
        list(LENGTH found n)
        if(n EQUAL 1)
          set(target_path "${found}")
        endif()
      endif()
      if(target_path)
        string(REGEX MATCH "^[^/]+" target_owner "${target_path}")
      endif()
    endif()
    if(NOT target_owner)
      continue()  # system, fmt, vendor SDK and generated headers
    endif()
    list(FIND allowed_${layer} ${target_owner} ok)
    if(ok EQUAL -1)
      list(APPEND violations "${rel}: ${layer} includes '${inc}' (${target_owner})")
    elseif(layer STREQUAL "backends" AND target_path MATCHES "^backends/")
      string(REGEX MATCH "^backends/[^/]+" their_backend "${target_path}")
      if(NOT their_backend STREQUAL own_backend AND NOT their_backend MATCHES "^backends/(amd|comm)_common$")
        list(APPEND violations "${rel}: includes another backend's '${inc}' (${their_backend})")
      endif()
    endif()
  endforeach()
endforeach()
list(LENGTH sources nfiles)
if(violations)
  string(REPLACE ";" "\n  " msg "${violations}")
  message(FATAL_ERROR "upward or sideways includes:\n  ${msg}")
endif()
message(STATUS "layering: ${nfiles} files, ${checked} includes, all pointing down")
