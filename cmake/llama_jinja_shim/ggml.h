// The one thing llama.cpp's common/json.cpp takes from ggml.h: its assertion macro.
#pragma once
#include <cstdio>
#include <cstdlib>
#define GGML_ASSERT(x)                                                          \
  do {                                                                          \
    if (!(x)) {                                                                 \
      std::fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #x); \
      std::abort();                                                             \
    }                                                                           \
  } while (0)
