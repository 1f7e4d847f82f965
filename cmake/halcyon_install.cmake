# The installed package (docs: README "Install"): exported targets halcyon::hal (libhalcyon,
# hal.h and the C++ API) and halcyon::runtime (libhalcyon_runtime, runtime.h, the MoE layer
# and the operator layer's headers), halcyonConfig.cmake + ConfigVersion for find_package, and
# halcyon.pc for pkg-config. Everything is relative to the install prefix: the tree can be
# moved (the config files and halcyon.pc find their prefix from their own location, the
# libraries their plugins from theirs through dladdr).
include(CMakePackageConfigHelpers)
set(HALCYON_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/halcyon)
install(EXPORT halcyonTargets NAMESPACE halcyon:: DESTINATION ${HALCYON_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/halcyonConfig.cmake.in
  ${PROJECT_BINARY_DIR}/halcyonConfig.cmake INSTALL_DESTINATION ${HALCYON_CMAKE_DIR})
# 0.x: a minor version may change the ABI, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/halcyonConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/halcyonConfig.cmake ${PROJECT_BINARY_DIR}/halcyonConfigVersion.cmake
  DESTINATION ${HALCYON_CMAKE_DIR})

# pkg-config: prefix from the .pc file's own folder (<prefix>/<libdir>/pkgconfig).
file(RELATIVE_PATH HALCYON_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" HALCYON_PC_TO_PREFIX "${HALCYON_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/halcyon.pc.in ${PROJECT_BINARY_DIR}/halcyon.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/halcyon.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The Python module (python/halcyon: ctypes over the C ABI, nothing to compile) into
# HALCYON_INSTALL_PYTHONDIR (CMakeLists.txt), relative to the prefix. The default,
# lib/python3/dist-packages, is the folder Debian's Python 3 reads for modules of any version: on
# sys.path for an install into /usr; for another prefix add <prefix>/lib/python3/dist-packages to
# PYTHONPATH. Beside it, _install.py names the library relative to the module's folder, so that
# `import halcyon` opens the library of its own install, moved or not (load(path) and
# HALCYON_LIBRARY still come first).
if(IS_ABSOLUTE "${HALCYON_INSTALL_PYTHONDIR}")
  message(FATAL_ERROR "HALCYON_INSTALL_PYTHONDIR must be relative to the install prefix (the module finds the "
                      "library from it): ${HALCYON_INSTALL_PYTHONDIR}")
endif()
file(RELATIVE_PATH HALCYON_PY_TO_LIBRARY /${HALCYON_INSTALL_PYTHONDIR}/halcyon
     /${CMAKE_INSTALL_LIBDIR}/libhalcyon_runtime.so.${PROJECT_VERSION_MAJOR})
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/python/_install.py CONTENT
     "# Written by cmake --install (cmake/halcyon_install.cmake): the library of this install, relative to this folder.\nLIBRARY = \"@HALCYON_PY_TO_LIBRARY@\"\n" @ONLY)
install(FILES ${PROJECT_SOURCE_DIR}/python/halcyon/__init__.py ${PROJECT_BINARY_DIR}/python/_install.py
        DESTINATION ${HALCYON_INSTALL_PYTHONDIR}/halcyon)
