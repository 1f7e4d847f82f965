# ELF checks of what libhalcyon and the plugins depend on (binutils' readelf and nm).
#
#   cmake -DMODE=needed -DREADELF=... -DFILE=libhalcyon.so -P check_elf.cmake
#     libhalcyon's DT_NEEDED entries must all be the C/C++ runtime or fmt: libc (with the
#     glibc pieces ld-linux, libm, libdl, libpthread, librt), libgcc_s, libstdc++, libfmt.
#     Anything else (libLLVM, a vendor library) belongs in a plugin.
#   cmake -DMODE=imports -DNM=... -DFILES="a.so;b.so" -P check_elf.cmake
#     no plugin may leave a symbol of libhalcyon undefined (hal_*, halcyon_*, halcyon::...):
#     it would not load next to a libhalcyon opened RTLD_LOCAL.
if(MODE STREQUAL "needed")
  execute_process(COMMAND ${READELF} -d ${FILE} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "readelf -d ${FILE} failed")
  endif()
  string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*\\[[^]\n]*\\]" lines "${out}")
  set(allowed "^(libc\\.so|ld-linux[-a-z0-9_]*\\.so|libm\\.so|libdl\\.so|libpthread\\.so|librt\\.so|libgcc_s\\.so|libstdc\\+\\+\\.so|libfmt\\.so)")
  if(SANITIZED)
    string(REPLACE "^(" "^(lib[a-z]*san\\.so|" allowed "${allowed}")
  endif()
  set(bad "")
  set(all "")
  foreach(l IN LISTS lines)
    string(REGEX REPLACE ".*\\[(.*)\\]" "\\1" lib "${l}")
    list(APPEND all ${lib})
    if(NOT lib MATCHES "${allowed}")
      list(APPEND bad ${lib})
    endif()
  endforeach()
  message(STATUS "${FILE} DT_NEEDED: ${all}")
  if(NOT all)
    message(FATAL_ERROR "no DT_NEEDED entries read from ${FILE}: is it a shared library?")
  endif()
  if(bad)
    message(FATAL_ERROR "${FILE} needs ${bad}: libhalcyon may depend only on libc, libstdc++ and fmt; "
                        "a backend that needs more is a plugin (halcyon_add_backend(... PLUGIN_ONLY))")
  endif()
elseif(MODE STREQUAL "imports")
  set(bad "")
  foreach(f IN LISTS FILES)
    execute_process(COMMAND ${NM} -D --undefined-only ${f} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "nm -D --undefined-only ${f} failed")
    endif()
    string(REGEX MATCHALL "[ \n][Uw] (hal_|halcyon_|_ZN7halcyon|_ZNK7halcyon)[A-Za-z0-9_]*" syms "${out}")
    if(syms)
      string(REGEX REPLACE "[ \n][Uw] " "" syms "${syms}")
      list(APPEND bad "${f}: ${syms}")
    else()
      message(STATUS "${f}: imports no symbol of libhalcyon")
    endif()
  endforeach()
  if(bad)
    string(REPLACE ";" "\n  " bad "${bad}")
    message(FATAL_ERROR "plugins import symbols of libhalcyon (use the host table of create(): "
                        "plugin.hpp's error()/log()):\n  ${bad}")
  endif()
else()
  message(FATAL_ERROR "MODE must be needed or imports")
endif()
