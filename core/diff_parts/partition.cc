#include "core/diff_parts/partition.h"

#include <algorithm>
#include <map>
#include <queue>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tensormorph {
namespace {

// What is dealt to a part: a whole file's items, or one item.
struct Unit {
  int64_t bytes = 0;
  const std::string* name = nullptr;  // the file's, or the item's
  size_t first = 0;                   // plan index of its first item
  std::vector<size_t> items;
};

}  // namespace

absl::Status CheckDiffRunId(absl::string_view run_id) {
  if (run_id.size() > kMaxDiffRunIdLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("part.run_id must be at most ", kMaxDiffRunIdLength,
                     " characters, got ", run_id.size()));
  }
  for (size_t i = 0; i < run_id.size(); ++i) {
    const char c = run_id[i];
    if (absl::ascii_isalnum(c) || c == '.' || c == '_' || c == ':' ||
        c == '-') {
      continue;
    }
    // The offending character, not the id: the rest may not be printable.
    return absl::InvalidArgumentError(absl::StrCat(
        "part.run_id may hold only A-Z a-z 0-9 . _ : -, got ",
        absl::ascii_isgraph(c)
            ? absl::StrCat("'", std::string(1, c), "'")
            : absl::StrFormat("byte 0x%02x", static_cast<unsigned char>(c)),
        " at offset ", i));
  }
  return absl::OkStatus();
}

absl::Status CheckDiffPart(int32_t count, int32_t index) {
  if (count == 0) {
    if (index == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "part.index must be 0 when part.count is 0 (the whole diff), got ",
        index));
  }
  if (count < 0 || count > kMaxDiffParts) {
    return absl::InvalidArgumentError(
        absl::StrCat("part.count must be 1 to ", kMaxDiffParts,
                     " (or 0 for the whole diff), got ", count));
  }
  if (index < 0 || index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("part.index must be 0 to ", count - 1, " (part.count is ",
                     count, "), got ", index));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> PartitionDiffPlan(
    absl::Span<const DiffPlanItem> plan, int32_t count) {
  if (count < 1 || count > kMaxDiffParts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "part count must be 1 to ", kMaxDiffParts, ", got ", count));
  }
  int64_t total = 0;
  for (const DiffPlanItem& item : plan) {
    if (item.bytes < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan item '", item.name, "' has ", item.bytes, " bytes (< 0)"));
    }
    if (__builtin_add_overflow(total, item.bytes, &total)) {
      return absl::InvalidArgumentError(
          "plan bytes overflow int64: not a plan of real files");
    }
  }
  // Groups by file, in order of first appearance (std::map: by name, no
  // hashing; the order is fixed by the sort below anyway).
  std::map<std::string, Unit> groups;
  for (size_t i = 0; i < plan.size(); ++i) {
    auto [it, added] = groups.try_emplace(plan[i].file);
    Unit& g = it->second;
    if (added) {
      g.name = &it->first;
      g.first = i;
    }
    g.bytes += plan[i].bytes;  // <= total: no overflow
    g.items.push_back(i);
  }
  const int64_t fair = total / count;
  std::vector<Unit> units;
  for (auto& [file, g] : groups) {
    if (g.bytes <= fair) {
      units.push_back(std::move(g));
      continue;
    }
    for (size_t i : g.items) {
      units.push_back({plan[i].bytes, &plan[i].name, i, {i}});
    }
  }
  std::sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) {
    return std::tie(b.bytes, *a.name, a.first) <
           std::tie(a.bytes, *b.name, b.first);
  });
  // The least-loaded part, ties to the lowest index: a min-heap on both.
  using Load = std::pair<int64_t, int32_t>;
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> parts;
  for (int32_t p = 0; p < count; ++p) parts.push({0, p});
  std::vector<int32_t> out(plan.size(), 0);
  for (const Unit& u : units) {
    auto [load, p] = parts.top();
    parts.pop();
    for (size_t i : u.items) out[i] = p;
    parts.push({load + u.bytes, p});  // <= total: no overflow
  }
  return out;
}

}  // namespace tensormorph
