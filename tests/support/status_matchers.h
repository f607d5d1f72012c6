// The status matchers, written once, for an absl::Status or
// absl::StatusOr<T>:
//  - HasReason(reason): the error carries that machine-readable reason
//    (core/util/error_reason.h; attached, or its code's generic one) and the
//    code the reason table gives it. Which error happened is asserted this
//    way:
//      EXPECT_THAT(client->GetTensor("m.gguf", "x"),
//                  HasReason(ErrorReason::kTensorNotFound));
//  - HasMetadata(key, value): the reason's metadata (ErrorInfo.metadata)
//    holds `key` = `value`: which tensor, limit or file, as a client reads
//    it.
//  - MessageNames(value) / MessageOmits(value): the message contains (never
//    contains) `value`. For a value the message must name for a person (the
//    file, field, line, expected and actual numbers) or must not leak (a
//    secret, a credential): never for its English prose.
//  - StatusIs(code, substring): that code and a message containing
//    `substring`; left for code that has no reason to match on (a test of
//    the matchers, a status made by a test's own helper).
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

MATCHER_P2(HasMetadata, key, value,
           std::string(negation ? "hasn't " : "has ") + "reason metadata " +
               std::string(key) + "=" + std::string(value)) {
  const absl::Status& s = status_matchers_internal::StatusOf(arg);
  *result_listener << "which is " << s;
  for (const auto& [k, v] : ::tensormorph::ReasonMetadataOf(s)) {
    if (k == std::string(key)) {
      *result_listener << " with " << k << "=" << v;
      return v == std::string(value);
    }
  }
  *result_listener << " without that key";
  return false;
}

MATCHER_P(MessageNames, value,
          std::string(negation ? "doesn't name " : "names ") + "'" +
              std::string(value) + "' in its message") {
  const absl::Status& s = status_matchers_internal::StatusOf(arg);
  *result_listener << "which is " << s;
  return !s.ok() &&
         s.message().find(std::string(value)) != absl::string_view::npos;
}

MATCHER_P(MessageOmits, value,
          std::string(negation ? "contains " : "never contains ") + "'" +
              std::string(value) + "' in its message") {
  const absl::Status& s = status_matchers_internal::StatusOf(arg);
  *result_listener << "which is " << s;
  return !s.ok() &&
         s.message().find(std::string(value)) == absl::string_view::npos;
}

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_STATUS_MATCHERS_H_
