// Compatibility shim: Abseil's CHECK macros for Abseil releases older than 20230125 (Debian 12
// ships 20220623, which has no absl/log). Added to the include path only when the installed Abseil
// lacks absl/log/check.h; code includes "absl/log/check.h" either way.
//
// CHECK(cond) << "message" aborts with file:line, the condition and the message when cond is
// false. DCHECK variants compile to nothing under NDEBUG.
#ifndef BATON_COMPAT_ABSL_LOG_CHECK_H_
#define BATON_COMPAT_ABSL_LOG_CHECK_H_

#include <cstdlib>
#include <iostream>
#include <sstream>

namespace baton_compat {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition) {
    stream_ << file << ":" << line << "] Check failed: " << condition << " ";
  }
  [[noreturn]] ~CheckFailure() {
    std::cerr << stream_.str() << std::endl;
    std::abort();
  }
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Swallows the stream expression of a check that passed or is compiled out.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace baton_compat

#define CHECK(condition)                                   \
  (condition) ? (void)0                                    \
              : ::baton_compat::Voidify() &                \
                    ::baton_compat::CheckFailure(__FILE__, __LINE__, #condition).stream()

#define BATON_COMPAT_CHECK_OP(a, op, b) CHECK((a)op(b)) << "(" << (a) << " vs " << (b) << ") "
#define CHECK_EQ(a, b) BATON_COMPAT_CHECK_OP(a, ==, b)
#define CHECK_NE(a, b) BATON_COMPAT_CHECK_OP(a, !=, b)
#define CHECK_LT(a, b) BATON_COMPAT_CHECK_OP(a, <, b)
#define CHECK_LE(a, b) BATON_COMPAT_CHECK_OP(a, <=, b)
#define CHECK_GT(a, b) BATON_COMPAT_CHECK_OP(a, >, b)
#define CHECK_GE(a, b) BATON_COMPAT_CHECK_OP(a, >=, b)
#define QCHECK(condition) CHECK(condition)

#ifdef NDEBUG
#define DCHECK(condition) \
  while (false) CHECK(condition)
#define DCHECK_EQ(a, b) DCHECK((a) == (b))
#define DCHECK_NE(a, b) DCHECK((a) != (b))
#define DCHECK_LT(a, b) DCHECK((a) < (b))
#define DCHECK_LE(a, b) DCHECK((a) <= (b))
#define DCHECK_GT(a, b) DCHECK((a) > (b))
#define DCHECK_GE(a, b) DCHECK((a) >= (b))
#else
#define DCHECK(condition) CHECK(condition)
#define DCHECK_EQ(a, b) CHECK_EQ(a, b)
#define DCHECK_NE(a, b) CHECK_NE(a, b)
#define DCHECK_LT(a, b) CHECK_LT(a, b)
#define DCHECK_LE(a, b) CHECK_LE(a, b)
#define DCHECK_GT(a, b) CHECK_GT(a, b)
#define DCHECK_GE(a, b) CHECK_GE(a, b)
#endif

#endif  // BATON_COMPAT_ABSL_LOG_CHECK_H_
