#include "server/exception_fence.h"

#include <cxxabi.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/log_line.h"

namespace tensormorph::fence_internal {
namespace {

// The demangled type of the exception being handled ("std::bad_alloc").
std::string CurrentExceptionType() {
  const std::type_info* type = abi::__cxa_current_exception_type();
  if (type == nullptr) return "unknown exception";
  int rc = 0;
  std::unique_ptr<char, decltype(&std::free)> name(
      abi::__cxa_demangle(type->name(), nullptr, nullptr, &rc), &std::free);
  return rc == 0 && name ? std::string(name.get()) : std::string(type->name());
}

std::string CurrentExceptionWhat() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "not a std::exception";
  }
}

}  // namespace

absl::Status CurrentExceptionStatus(const FenceSite& site) {
  const std::string type = CurrentExceptionType();
  const std::string what = CurrentExceptionWhat();
  // The names and what() come from clients and files: escaped fields.
  LogFields(spdlog::level::err, site.call,
            {{"exception", "fenced", LogField::kToken},
             {"checkpoint", site.checkpoint},
             {"tensor", site.tensor},
             {"type", type},
             {"what", what}});
  std::string where(site.call);
  if (!site.checkpoint.empty() || !site.tensor.empty()) {
    absl::StrAppend(&where, " (");
    if (!site.checkpoint.empty()) {
      absl::StrAppend(&where, "checkpoint '", site.checkpoint, "'");
    }
    if (!site.tensor.empty()) {
      absl::StrAppend(&where, site.checkpoint.empty() ? "" : ", ", "tensor '",
                      site.tensor, "'");
    }
    absl::StrAppend(&where, ")");
  }
  return absl::InternalError(absl::StrCat(
      "internal error in ", where, ": unexpected exception ", type, " (", what,
      "); the call was ended and the server keeps serving; please "
      "report this with the file"));
}

}  // namespace tensormorph::fence_internal
