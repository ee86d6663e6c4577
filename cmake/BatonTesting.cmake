# baton_add_test(NAME name SOURCES ... DEPS ... [LABEL label])
# One GoogleTest binary per call, its tests registered with ctest one by one.
enable_testing()
include(GoogleTest)

function(baton_add_test)
  cmake_parse_arguments(ARG "" "NAME;LABEL" "SOURCES;DEPS" ${ARGN})
  set(sources ${ARG_SOURCES})
  if(BATON_SANITIZE)
    list(APPEND sources ${PROJECT_SOURCE_DIR}/tests/support/asan_options.cc)
  endif()
  add_executable(${ARG_NAME} ${sources})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_definitions(${ARG_NAME} PRIVATE
    BATON_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    BATON_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(${ARG_NAME}
    DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS "${ARG_LABEL}" ENVIRONMENT "BATON_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
