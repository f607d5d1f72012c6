// The status matchers, written once, for an absl::Status or
// absl::StatusOr<T>:
//  - HasReason(reason): the error carries that machine-readable reason
//    (core/util/error_reason.h; attached, or its code's generic one) and the
//    code the reason table gives it. Which error happened is asserted this
//    way:
//      EXPECT_THAT(client->GetTensor("m.gguf", "x"),
//                  HasReason(ErrorReason::kTensorNotFound));
//  - StatusIs(code, substring): that code and a message containing
//    `substring`: only where the message itself is the contract (it names
//    the file, never names the token, ...).
#ifndef TENSORMORPH_TESTS_SUPPORT_STATUS_MATCHERS_H_
#define TENSORMORPH_TESTS_SUPPORT_STATUS_MATCHERS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/util/error_reason.h"
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

MATCHER_P(HasReason, reason,
          std::string(negation ? "hasn't " : "has ") + "reason " +
              std::string(::tensormorph::InfoOf(reason).name) + " (" +
              absl::StatusCodeToString(::tensormorph::InfoOf(reason).code) +
              ")") {
  const absl::Status& s = status_matchers_internal::StatusOf(arg);
  *result_listener << "which is " << s << " with reason "
                   << ::tensormorph::ReasonNameOf(s);
  return s.code() == ::tensormorph::InfoOf(reason).code &&
         ::tensormorph::IsReason(s, reason);
}

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_STATUS_MATCHERS_H_
