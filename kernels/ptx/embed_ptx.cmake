# cmake -DIN=x.ptx -DCUBIN=x.cubin -DOUT=x.ptx.cpp -DSYMBOL=name -DTARGET=sm_90a -P embed_ptx.cmake
# Writes the PTX text as a NUL-terminated char array, after checking its .target, and the
# cubin that ptxas made of it (for devices of exactly that target) as a byte array.
file(READ "${IN}" text)
string(REGEX MATCH "\n[ \t]*\\.target[ \t]+([a-z0-9_]+)" m "\n${text}")
if(NOT CMAKE_MATCH_1 STREQUAL TARGET)
  message(FATAL_ERROR "${IN}: .target is '${CMAKE_MATCH_1}', but it is listed for ${TARGET}")
endif()
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR size "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," body "${hex}")
string(REGEX REPLACE "(('\\\\x[0-9a-f][0-9a-f]',){16})" "\\1\n" body "${body}")
file(READ "${CUBIN}" chex HEX)
string(LENGTH "${chex}" cn)
math(EXPR csize "${cn} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," cbody "${chex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){32})" "\\1\n" cbody "${cbody}")
file(WRITE "${OUT}.tmp"
  "// Generated from ${IN} and ${CUBIN}\n#include <cstddef>\n"
  "extern const char ${SYMBOL}[] = {\n${body}'\\0'};\n"
  "extern const size_t ${SYMBOL}_size = ${size};\n"
  "extern const unsigned char ${SYMBOL}_cubin[] = {\n${cbody}};\n"
  "extern const size_t ${SYMBOL}_cubin_size = ${csize};\n")
file(RENAME "${OUT}.tmp" "${OUT}")
