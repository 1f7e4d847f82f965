# cmake -DREADELF=<readelf> -DFILES="a.so|b.so" -P check_no_libcuda.cmake
# Fails if a file needs libcuda/libcudart at link time or leaves a cu* driver symbol undefined:
# the CUDA backend must reach the driver only through dlopen.
string(REPLACE "|" ";" files "${FILES}")
foreach(f IN LISTS files)
  execute_process(COMMAND ${READELF} -d -W ${f} OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "readelf -d ${f} failed")
  endif()
  if(dyn MATCHES "NEEDED[^\n]*libcuda")
    message(FATAL_ERROR "${f} links against the CUDA driver or runtime:\n${dyn}")
  endif()
  execute_process(COMMAND ${READELF} --dyn-syms -W ${f} OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
  if(syms MATCHES "UND (cu[A-Z][A-Za-z0-9_]*)")
    message(FATAL_ERROR "${f} leaves the driver symbol ${CMAKE_MATCH_1} undefined")
  endif()
  message(STATUS "${f}: no link-time CUDA dependency")
endforeach()
