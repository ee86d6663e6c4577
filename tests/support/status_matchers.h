// A GoogleMock matcher for absl::StatusOr<T>, for tests.
//
// A StatusOr that is not ok must never be dereferenced: check it with ASSERT_TRUE(x.ok()) before
// `*x`, or match it whole, which never dereferences an error:
//
//   EXPECT_THAT(file.GetUint("general.alignment"), IsOkAndHolds(64u));
//   EXPECT_THAT(ParseName("x"), IsOkAndHolds(testing::Field(&Name::id, 3)));
//
// Thread-safety: the matchers hold no state of their own.
#ifndef BATON_TESTS_SUPPORT_STATUS_MATCHERS_H_
#define BATON_TESTS_SUPPORT_STATUS_MATCHERS_H_

#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace baton::test_support {

// Matches an ok StatusOr<T> whose value matches `inner` (a matcher, or a value to compare with
// ==). An error does not match, and the failure shows its status.
MATCHER_P(IsOkAndHolds, inner,
          std::string(negation ? "is not ok or holds a value that "
                               : "is ok and holds a value that ") +
              ::testing::DescribeMatcher<const typename std::remove_cvref_t<arg_type>::value_type&>(
                  inner, negation)) {
  if (!arg.ok()) {
    *result_listener << "whose status is " << arg.status();
    return false;
  }
  ::testing::StringMatchResultListener inner_listener;
  const bool matches = ::testing::ExplainMatchResult(inner, *arg, &inner_listener);
  *result_listener << "whose value is " << ::testing::PrintToString(*arg);
  if (!inner_listener.str().empty()) *result_listener << ", " << inner_listener.str();
  return matches;
}

}  // namespace baton::test_support

#endif  // BATON_TESTS_SUPPORT_STATUS_MATCHERS_H_
