// Compiled into every test binary of a sanitizer build (cmake/BatonTesting.cmake): an allocation
// too large to satisfy fails there as in a plain build, with null from nothrow new, so the tests
// of RESOURCE_EXHAUSTED run under ASan too.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
