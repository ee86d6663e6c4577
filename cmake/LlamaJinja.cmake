# llama.cpp's Jinja engine (MIT), the chat-template renderer: built from the files
# scripts/fetch_deps.sh extracts from llama-cpp-python's source distribution on PyPI into
# third_party/llama-jinja. A dependency, compiled without the project's warnings.
set(BATON_LLAMA_JINJA_DIR ${PROJECT_SOURCE_DIR}/third_party/llama-jinja)
if(NOT EXISTS ${BATON_LLAMA_JINJA_DIR}/common/jinja/runtime.h)
  message(FATAL_ERROR "third_party/llama-jinja is missing: run scripts/fetch_deps.sh "
    "(scripts/setup.sh and scripts/build.sh run it)")
endif()
file(GLOB BATON_LLAMA_JINJA_SOURCES CONFIGURE_DEPENDS ${BATON_LLAMA_JINJA_DIR}/common/jinja/*.cpp)
add_library(llama_jinja STATIC ${BATON_LLAMA_JINJA_SOURCES}
  ${BATON_LLAMA_JINJA_DIR}/common/json.cpp ${BATON_LLAMA_JINJA_DIR}/common/unicode.cpp)
# Users include "jinja/runtime.h" and the like (common/jinja itself is not on the path: its
# string.h would stand in for the C library's).
target_include_directories(llama_jinja SYSTEM PUBLIC ${BATON_LLAMA_JINJA_DIR}/common)
target_include_directories(llama_jinja PRIVATE ${PROJECT_SOURCE_DIR}/cmake/llama_jinja_shim)
target_link_libraries(llama_jinja PRIVATE nlohmann_json::nlohmann_json)
target_compile_options(llama_jinja PRIVATE -w)
set_target_properties(llama_jinja PROPERTIES POSITION_INDEPENDENT_CODE ON)
