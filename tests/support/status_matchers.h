// StatusIs(code, substring): the one matcher for an absl::Status or
// absl::StatusOr<T> with that code and a message containing `substring`
// (the project's errors name what failed; tests check the name).
//   EXPECT_THAT(client->GetCheckpoint("x"),
//               StatusIs(absl::StatusCode::kNotFound, "'x' not found"));
#ifndef TENSORMORPH_TESTS_SUPPORT_STATUS_MATCHERS_H_
#define TENSORMORPH_TESTS_SUPPORT_STATUS_MATCHERS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace tensormorph::testing {

namespace status_matchers_internal {
inline const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace status_matchers_internal

MATCHER_P2(StatusIs, code, substring,
           std::string(negation ? "isn't " : "is ") +
               absl::StatusCodeToString(code) + " with a message containing '" +
               std::string(substring) + "'") {
  const absl::Status& s = status_matchers_internal::StatusOf(arg);
  *result_listener << "which is " << s;
  return s.code() == code &&
         s.message().find(std::string(substring)) != absl::string_view::npos;
}

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_STATUS_MATCHERS_H_
