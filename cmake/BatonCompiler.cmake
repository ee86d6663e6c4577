# Compiler setup: ccache, warnings, sanitizers, fuzzing flags.

find_program(BATON_CCACHE ccache)
if(BATON_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER ${BATON_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${BATON_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${BATON_CCACHE})
endif()

add_compile_options(
  "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wno-unused-parameter;-Wno-sign-compare>")

if(BATON_SANITIZE)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX,C>:-fsanitize=address,undefined;-fno-sanitize-recover=undefined;-fno-omit-frame-pointer>")
  add_link_options(-fsanitize=address,undefined)
endif()

if(BATON_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "BATON_FUZZ needs clang (CXX=clang++)")
  endif()
  # Everything is instrumented for coverage; only the fuzz targets link the libFuzzer main.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
