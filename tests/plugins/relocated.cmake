# An install's layout anywhere: libhalcyon copied to DIR/lib and the amdgpu-sim plugin to
# DIR/lib/halcyon/plugins; the copy must find the plugin there, by itself (and not the build
# tree's plugins/).
#   cmake -DDIR=... -DLIB=<libhalcyon file> -DSIM=<plugin file> -DCPU=<cpu plugin> -DTEST=<test_rtld_local>
#         -DCO=<code object> -P relocated.cmake
file(REMOVE_RECURSE ${DIR})
file(COPY ${LIB} DESTINATION ${DIR}/lib)
file(COPY ${SIM} DESTINATION ${DIR}/lib/halcyon/plugins)
get_filename_component(name ${LIB} NAME)
execute_process(COMMAND ${TEST} ${DIR}/lib/${name} ${CPU} desc ${DIR}/lib/halcyon/plugins ${CO} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the relocated libhalcyon did not find its plugin folder ${DIR}/lib/halcyon/plugins")
endif()
