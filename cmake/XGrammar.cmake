# xgrammar's C++ core (Apache-2.0), the grammar engine of structured output (grammar/): the
# archive scripts/fetch_deps.sh builds once into third_party/xgrammar, imported as `xgrammar`.
set(BATON_XGRAMMAR_DIR ${PROJECT_SOURCE_DIR}/third_party/xgrammar)
if(NOT EXISTS ${BATON_XGRAMMAR_DIR}/lib/libxgrammar.a)
  message(FATAL_ERROR "third_party/xgrammar is missing: run scripts/fetch_deps.sh "
    "(scripts/setup.sh and scripts/build.sh run it)")
endif()
add_library(xgrammar STATIC IMPORTED GLOBAL)
set_target_properties(xgrammar PROPERTIES
  IMPORTED_LOCATION ${BATON_XGRAMMAR_DIR}/lib/libxgrammar.a
  INTERFACE_SYSTEM_INCLUDE_DIRECTORIES
    "${BATON_XGRAMMAR_DIR}/include;${BATON_XGRAMMAR_DIR}/3rdparty/dlpack/include"
  INTERFACE_INCLUDE_DIRECTORIES
    "${BATON_XGRAMMAR_DIR}/include;${BATON_XGRAMMAR_DIR}/3rdparty/dlpack/include"
  INTERFACE_COMPILE_DEFINITIONS XGRAMMAR_ENABLE_CPPTRACE=0)
target_link_libraries(xgrammar INTERFACE Threads::Threads)
