# Compiler setup: ccache, warnings, sanitizers, fuzzing flags.

find_program(BATON_CCACHE ccache)
if(BATON_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER ${BATON_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${BATON_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${BATON_CCACHE})
endif()

# -Wno-missing-field-initializers: designated initializers that leave fields to their defaults
# (`Options{.port = 0}`) are the intended style, not an oversight.
add_compile_options(
  "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wno-unused-parameter;-Wno-sign-compare;-Wno-missing-field-initializers>")

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
