#include "core/check/duplicates.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/check/rules.h"
#include "core/check/xxh3.h"
#include "core/io/fault_guard.h"
#include "core/util/status_macros.h"

namespace tensormorph {
namespace {

struct Hashed {
  size_t index;  // into ckpt.stored_tensors()
  uint64_t hash, size;
};

absl::Status Cancelled(const std::atomic<bool>* cancelled) {
  if (cancelled != nullptr && cancelled->load()) {
    return absl::CancelledError("cancelled");
  }
  return absl::OkStatus();
}

// The tensors that share a size and a sampled fingerprint, with their full
// hash: every set of equal tensors is among them.
absl::StatusOr<std::vector<Hashed>> Candidates(
    const Checkpoint& ckpt, const std::atomic<bool>* cancelled) {
  const std::vector<StoredTensor>& stored = ckpt.stored_tensors();
  // By the size the tensor declares and the bytes it holds (fewer in a
  // file cut short), as its manifest entry has them.
  std::map<std::pair<uint64_t, uint64_t>, std::vector<size_t>> by_size;
  for (size_t i = 0; i < stored.size(); ++i) {
    if (stored[i].nbytes == 0) continue;
    by_size[{stored[i].nbytes, stored[i].data.size()}].push_back(i);
  }
  std::vector<Hashed> out;
  for (const auto& [sizes, members] : by_size) {
    const auto [size, held] = sizes;
    if (members.size() < 2) continue;
    std::map<uint64_t, std::vector<size_t>> by_print;
    for (size_t i : members) {
      TM_RETURN_IF_ERROR(Cancelled(cancelled));
      uint64_t print = 0;
      TM_RETURN_IF_ERROR(GuardedRead([&] {
        print = SampledFingerprint(stored[i].data);
        return absl::OkStatus();
      }));
      by_print[print].push_back(i);
    }
    for (const auto& [print, same] : by_print) {
      if (same.size() < 2) continue;
      for (size_t i : same) {
        uint64_t hash = print;  // the whole tensor when it is this small
        if (held > kFingerprintWhole) {
          TM_ASSIGN_OR_RETURN(ManifestEntry e,
                              HashStoredTensor(ckpt, stored[i], cancelled));
          hash = e.hash;
        }
        out.push_back({i, hash, size});
      }
    }
  }
  return out;
}

}  // namespace

std::vector<std::pair<uint64_t, uint64_t>> FingerprintWindows(uint64_t size) {
  if (size <= kFingerprintWhole) return {{0, size}};
  std::vector<std::pair<uint64_t, uint64_t>> w;
  const uint64_t span = size - kFingerprintWindow;
  for (uint64_t k = 0; k < kFingerprintWindows; ++k) {
    // k * span <= 15 * size: no overflow below 2^59 bytes.
    w.push_back({k * span / (kFingerprintWindows - 1), kFingerprintWindow});
  }
  return w;
}

uint64_t SampledFingerprint(absl::Span<const uint8_t> bytes) {
  if (bytes.size() <= kFingerprintWhole) {
    return XXH3_64bits(bytes.data(), bytes.size());
  }
  // The windows copied side by side, then hashed in one call.
  uint8_t buf[kFingerprintWhole];
  uint64_t at = 0;
  for (const auto& [offset, n] : FingerprintWindows(bytes.size())) {
    std::memcpy(buf + at, bytes.data() + offset, n);
    at += n;
  }
  return XXH3_64bits(buf, at);
}

absl::Status FindDuplicateTensors(const Checkpoint& ckpt,
                                  const std::vector<ManifestEntry>* hashes,
                                  const std::atomic<bool>* cancelled,
                                  std::vector<Finding>* out) {
  std::vector<Hashed> hashed;
  if (hashes != nullptr) {
    for (size_t i = 0; i < hashes->size(); ++i) {
      hashed.push_back({i, (*hashes)[i].hash, (*hashes)[i].size});
    }
  } else {
    TM_ASSIGN_OR_RETURN(hashed, Candidates(ckpt, cancelled));
  }
  std::map<std::pair<uint64_t, uint64_t>, std::vector<size_t>> by_hash;
  for (const Hashed& h : hashed) {
    if (h.size == 0) continue;
    by_hash[{h.hash, h.size}].push_back(h.index);
  }
  const std::vector<StoredTensor>& stored = ckpt.stored_tensors();
  for (auto& [key, members] : by_hash) {
    if (members.size() < 2) continue;
    std::sort(members.begin(), members.end());  // compared to the first
    const StoredTensor& a = stored[members[0]];
    std::vector<std::string> same = {a.name};
    for (size_t k = 1; k < members.size(); ++k) {
      const StoredTensor& b = stored[members[k]];
      bool equal = false;
      TM_RETURN_IF_ERROR(GuardedRead([&] {
        equal = std::memcmp(a.data.data(), b.data.data(), a.data.size()) == 0;
        return absl::OkStatus();
      }));
      if (equal) same.push_back(b.name);
    }
    if (same.size() < 2) continue;
    std::sort(same.begin(), same.end());
    std::string list;
    for (size_t k = 0; k < same.size() && k < 8; ++k) {
      absl::StrAppend(&list, k == 0 ? "" : ", ", same[k]);
    }
    if (same.size() > 8) absl::StrAppend(&list, ", ...");
    Finding f;
    f.rule = "duplicate-tensor";
    f.severity = FindCheckRule(f.rule)->severity;
    f.tensor = same[0];
    f.file = ckpt.files()[a.file_index].path;
    f.expected = "distinct stored bytes per tensor";
    f.actual =
        absl::StrCat(same.size(), " tensors hold the same ", a.nbytes,
                     " bytes (xxh3-64 ", HashHex(key.first), "): ", list);
    f.hint =
        "fine for tied weights or repeated index tensors saved twice; "
        "otherwise one tensor was written in place of another";
    f.count = static_cast<int64_t>(same.size());
    out->push_back(std::move(f));
  }
  return absl::OkStatus();
}

}  // namespace tensormorph
