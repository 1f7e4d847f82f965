# tests/install: install, move, build examples/ against the moved install two ways, run them.
#   cmake -DBUILD= -DWORK= -DEXAMPLES= -DGENERATOR= -DCC= -DCXX= -DPKG_CONFIG= -DREADELF=
#         -DLIBDIR= -DVERSION= -DPLUGIN_SCHEMES=a|b -DPYTHON= -DPYDIR= -DPYCHECK= -P install_package.cmake
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${what}:\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}): ${ARGN}")
  endif()
  set(last_output "${out}${err}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK})
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/staged)
# Relocatable: nothing may point back to the prefix it was installed to.
file(RENAME ${WORK}/staged ${WORK}/moved)
set(prefix ${WORK}/moved)
set(libdir ${prefix}/${LIBDIR})

# Every installed library has a versioned SONAME: libX.so.<major>, with the .so link for -lX.
string(REGEX MATCH "^[0-9]+" major ${VERSION})
foreach(lib halcyon halcyon_runtime)
  if(NOT EXISTS ${libdir}/lib${lib}.so OR NOT EXISTS ${libdir}/lib${lib}.so.${VERSION})
    message(FATAL_ERROR "${libdir}: lib${lib}.so or lib${lib}.so.${VERSION} is missing")
  endif()
  if(READELF)
    run("readelf -d lib${lib}" ${READELF} -d ${libdir}/lib${lib}.so.${VERSION})
    if(NOT last_output MATCHES "Library soname: \\[lib${lib}\\.so\\.${major}\\]")
      message(FATAL_ERROR "lib${lib}.so.${VERSION} has no SONAME lib${lib}.so.${major}")
    endif()
  endif()
endforeach()
foreach(f ${LIBDIR}/cmake/halcyon/halcyonConfig.cmake ${LIBDIR}/cmake/halcyon/halcyonConfigVersion.cmake
          ${LIBDIR}/pkgconfig/halcyon.pc include/halcyon/hal.h include/halcyon/runtime.h
          include/halcyon/runtime/moe_layer.hpp include/halcyon/ops/op.hpp)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the install lacks ${f}")
  endif()
endforeach()

# The installed CLI finds its libraries and the moved install's plugin folder by itself.
run("halcyon info -v" ${prefix}/bin/halcyon info -v)
string(REPLACE "|" ";" schemes "${PLUGIN_SCHEMES}")
foreach(s IN LISTS schemes)
  if(NOT last_output MATCHES "${s} +available +${libdir}/halcyon/plugins/libhalcyon_backend_")
    message(FATAL_ERROR "halcyon info -v: the ${s} plugin was not loaded from ${libdir}/halcyon/plugins")
  endif()
endforeach()

# The installed Python module finds its own install's library (no HALCYON_LIBRARY, no
# LD_LIBRARY_PATH) and runs an operator.
if(NOT PYTHON)
  message(FATAL_ERROR "python3 not found (scripts/setup-debian.sh installs it, with python3-numpy)")
endif()
if(NOT EXISTS ${prefix}/${PYDIR}/halcyon/__init__.py OR NOT EXISTS ${prefix}/${PYDIR}/halcyon/_install.py)
  message(FATAL_ERROR "the install lacks the Python module (${PYDIR}/halcyon)")
endif()
unset(ENV{HALCYON_LIBRARY})
unset(ENV{LD_LIBRARY_PATH})
set(ENV{PYTHONPATH} ${prefix}/${PYDIR})
run("the installed Python module" ${PYTHON} ${PYCHECK} ${prefix} ${libdir})
unset(ENV{PYTHONPATH})

set(cm_args -G ${GENERATOR} -DCMAKE_C_COMPILER=${CC} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release)
# 1. find_package(halcyon 0.1), as examples/CMakeLists.txt does standalone.
run("configure examples (find_package)" ${CMAKE_COMMAND} -S ${EXAMPLES} -B ${WORK}/cmake-build
    -DCMAKE_PREFIX_PATH=${prefix} ${cm_args})
run("build examples (find_package)" ${CMAKE_COMMAND} --build ${WORK}/cmake-build)
run("example_c_abi" ${WORK}/cmake-build/example_c_abi)
run("example_moe_layer" ${WORK}/cmake-build/example_moe_layer cpu:0 33)
run("example_request_loop" ${WORK}/cmake-build/example_request_loop cpu:0 3 3)

# 2. pkg-config, with plain compiler commands.
if(PKG_CONFIG)
  set(ENV{PKG_CONFIG_PATH} ${libdir}/pkgconfig)
  run("pkg-config --modversion" ${PKG_CONFIG} --modversion halcyon)
  string(STRIP "${last_output}" got)
  if(NOT got STREQUAL VERSION)
    message(FATAL_ERROR "pkg-config says halcyon ${got}, the build is ${VERSION}")
  endif()
  run("pkg-config --cflags --libs" ${PKG_CONFIG} --cflags --libs halcyon)
  string(STRIP "${last_output}" flags)
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(out ${WORK}/pc-build)
  file(MAKE_DIRECTORY ${out})
  run("cc c_abi.c" ${CC} -std=c11 ${EXAMPLES}/c_abi.c ${flags} -lm -Wl,-rpath,${libdir} -o ${out}/c_abi)
  run("c++ moe_layer.cpp" ${CXX} -std=c++20 ${EXAMPLES}/moe_layer.cpp ${flags} -Wl,-rpath,${libdir}
      -o ${out}/moe_layer)
  run("c_abi (pkg-config)" ${out}/c_abi)
  run("moe_layer (pkg-config)" ${out}/moe_layer cpu:0 5)
else()
  message(FATAL_ERROR "pkg-config not found (scripts/setup-debian.sh installs it)")
endif()
file(REMOVE_RECURSE ${WORK})
