#include "core/check/manifest.h"

#include <algorithm>
#include <map>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/check/xxh3.h"
#include "core/format/json_header.h"
#include "core/io/fault_guard.h"
#include "core/util/status_macros.h"

namespace tensormorph {
namespace {

// Hashed a piece at a time: a cancelled check stops within one piece, and
// progress moves smoothly through a multi-gigabyte embedding.
constexpr uint64_t kHashPiece = uint64_t{16} << 20;

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

absl::Status Bad(absl::string_view path, absl::string_view expected,
                 const nlohmann::json& got) {
  std::string shown = got.dump();
  if (shown.size() > 64) shown = shown.substr(0, 61) + "...";
  return absl::InvalidArgumentError(
      absl::StrCat("manifest: ", path, ": expected ", expected, ", got ",
                   got.type_name(), " ", shown));
}

absl::StatusOr<std::string> StringField(const nlohmann::json& obj,
                                        const std::string& path,
                                        const char* key) {
  auto it = obj.find(key);
  const std::string where = absl::StrCat(path, ".", key);
  if (it == obj.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest: ", where, ": missing (expected a string)"));
  }
  if (!it->is_string()) return Bad(where, "a string", *it);
  return it->get<std::string>();
}

absl::StatusOr<uint64_t> UintField(const nlohmann::json& obj,
                                   const std::string& path, const char* key) {
  auto it = obj.find(key);
  const std::string where = absl::StrCat(path, ".", key);
  if (it == obj.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "manifest: ", where, ": missing (expected a non-negative integer)"));
  }
  // Floats are refused, not truncated; negative integers are signed.
  if (!it->is_number_unsigned()) {
    return Bad(where, "a non-negative integer", *it);
  }
  return it->get<uint64_t>();
}

absl::StatusOr<uint64_t> ParseHashHex(absl::string_view where,
                                      const std::string& s) {
  uint64_t h = 0;
  bool ok = s.size() == 16;
  for (char c : s) {
    if (!ok) break;
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) ok = false;
    h = h << 4 | static_cast<uint64_t>(d < 0 ? 0 : d);
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "manifest: ", where, ": expected 16 hex digits, got \"", s, "\""));
  }
  return h;
}

}  // namespace

std::string HashHex(uint64_t hash) { return absl::StrFormat("%016x", hash); }

ManifestEntry ManifestEntryOf(const Checkpoint& ckpt, const StoredTensor& t) {
  ManifestEntry e;
  e.name = t.name;
  e.file = BaseName(ckpt.files()[t.file_index].path);
  e.offset = t.offset;
  e.size = t.nbytes;
  e.dtype = std::string(DTypeName(t.dtype));
  return e;
}

absl::StatusOr<ManifestEntry> HashStoredTensor(
    const Checkpoint& ckpt, const StoredTensor& t,
    const std::atomic<bool>* cancelled,
    const std::function<void(int64_t)>& on_bytes) {
  ManifestEntry e = ManifestEntryOf(ckpt, t);
  XXH3_state_t* state = XXH3_createState();
  if (state == nullptr) return absl::ResourceExhaustedError("XXH3 state");
  XXH3_64bits_reset(state);
  absl::Status s = absl::OkStatus();
  for (uint64_t at = 0; at < t.data.size(); at += kHashPiece) {
    if (cancelled != nullptr && cancelled->load()) {
      s = absl::CancelledError("cancelled");
      break;
    }
    const uint64_t n = std::min<uint64_t>(kHashPiece, t.data.size() - at);
    s = GuardedRead([&] {
      XXH3_64bits_update(state, t.data.data() + at, n);
      return absl::OkStatus();
    });
    if (!s.ok()) break;
    if (on_bytes) on_bytes(static_cast<int64_t>(n));
  }
  e.hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  if (!s.ok()) return s;
  return e;
}

std::string ManifestJson(const std::vector<ManifestEntry>& entries) {
  std::string out = absl::StrCat("{\"format\": \"", kManifestFormat,
                                 "\", \"version\": 1, \"hash\": \"",
                                 kManifestHash, "\", \"tensors\": [");
  for (size_t i = 0; i < entries.size(); ++i) {
    const ManifestEntry& e = entries[i];
    nlohmann::json j = {{"name", e.name},     {"file", e.file},
                        {"offset", e.offset}, {"size", e.size},
                        {"dtype", e.dtype},   {"hash", HashHex(e.hash)}};
    // Names that are not UTF-8 are escaped by the readers already; any
    // other byte the dump cannot encode is replaced, never thrown.
    absl::StrAppend(
        &out, i == 0 ? "\n  " : ",\n  ",
        j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  absl::StrAppend(&out, "\n]}\n");
  return out;
}

absl::StatusOr<std::vector<ManifestEntry>> ParseManifest(
    absl::string_view text) {
  if (text.size() > kMaxManifestBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest: ", text.size(), " bytes, more than the ",
                     kMaxManifestBytes, " a manifest may hold"));
  }
  absl::StatusOr<nlohmann::json> parsed = ParseStrictJson(text, "manifest");
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(parsed.status().message());
  }
  const nlohmann::json& j = *parsed;
  if (!j.is_object()) return Bad("(top level)", "an object", j);
  TM_ASSIGN_OR_RETURN(std::string format, StringField(j, "", "format"));
  if (format != kManifestFormat) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest: .format: expected \"", kManifestFormat,
                     "\", got \"", format, "\""));
  }
  TM_ASSIGN_OR_RETURN(uint64_t version, UintField(j, "", "version"));
  if (version != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest: .version: expected 1, got ", version,
                     " (written by a newer tensormorph?)"));
  }
  TM_ASSIGN_OR_RETURN(std::string hash, StringField(j, "", "hash"));
  if (hash != kManifestHash) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest: .hash: expected \"", kManifestHash,
                     "\", got \"", hash, "\""));
  }
  auto tensors = j.find("tensors");
  if (tensors == j.end()) {
    return absl::InvalidArgumentError(
        "manifest: .tensors: missing (expected an array of tensors)");
  }
  if (!tensors->is_array()) return Bad(".tensors", "an array", *tensors);
  std::vector<ManifestEntry> out;
  out.reserve(tensors->size());
  absl::flat_hash_set<std::string> names;
  for (size_t i = 0; i < tensors->size(); ++i) {
    const nlohmann::json& t = (*tensors)[i];
    const std::string path = absl::StrCat(".tensors[", i, "]");
    if (!t.is_object()) return Bad(path, "an object", t);
    ManifestEntry e;
    TM_ASSIGN_OR_RETURN(e.name, StringField(t, path, "name"));
    if (e.name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest: ", path, ".name: empty"));
    }
    if (!names.insert(e.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "manifest: ", path, ".name: '", e.name, "' is listed twice"));
    }
    TM_ASSIGN_OR_RETURN(e.file, StringField(t, path, "file"));
    TM_ASSIGN_OR_RETURN(e.offset, UintField(t, path, "offset"));
    TM_ASSIGN_OR_RETURN(e.size, UintField(t, path, "size"));
    TM_ASSIGN_OR_RETURN(e.dtype, StringField(t, path, "dtype"));
    TM_ASSIGN_OR_RETURN(std::string hex, StringField(t, path, "hash"));
    TM_ASSIGN_OR_RETURN(e.hash, ParseHashHex(absl::StrCat(path, ".hash"), hex));
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<Finding> CompareManifest(const std::vector<ManifestEntry>& expected,
                                     const std::vector<ManifestEntry>& actual) {
  std::map<absl::string_view, const ManifestEntry*> have;
  for (const ManifestEntry& e : actual) have[e.name] = &e;
  std::map<std::string, Finding> out;  // by name
  auto finding = [](const ManifestEntry& where) {
    Finding f;
    f.rule = "manifest-mismatch";
    f.severity = Severity::kError;
    f.tensor = where.name;
    f.file = where.file;
    return f;
  };
  auto describe = [](const ManifestEntry& e) {
    return absl::StrCat(e.dtype, ", ", e.size, " bytes, xxh3-64 ",
                        HashHex(e.hash));
  };
  absl::flat_hash_set<absl::string_view> listed;
  for (const ManifestEntry& want : expected) {
    listed.insert(want.name);
    auto it = have.find(want.name);
    if (it == have.end()) {
      Finding f = finding(want);
      f.expected = absl::StrCat("in '", want.file, "': ", describe(want));
      f.actual = "missing from the checkpoint checked";
      f.hint =
          "the copy lost this tensor: copy its file again from the original";
      out.emplace(want.name, std::move(f));
      continue;
    }
    const ManifestEntry& got = *it->second;
    if (got.hash == want.hash && got.size == want.size &&
        got.dtype == want.dtype) {
      continue;
    }
    Finding f = finding(got);
    f.expected = describe(want);
    f.actual = absl::StrCat(describe(got), " in '", got.file, "' at offset ",
                            got.offset);
    f.hint = absl::StrCat(
        "the bytes of this tensor changed since the manifest was written: "
        "copy '",
        got.file, "' again from the original");
    out.emplace(want.name, std::move(f));
  }
  for (const ManifestEntry& got : actual) {
    if (listed.contains(got.name)) continue;
    Finding f = finding(got);
    f.expected = "not in the manifest";
    f.actual = absl::StrCat("present in '", got.file, "': ", describe(got));
    f.hint =
        "a tensor the original did not have: check where the copy came "
        "from, or write a new manifest from the original";
    out.emplace(got.name, std::move(f));
  }
  std::vector<Finding> v;
  v.reserve(out.size());
  for (auto& [name, f] : out) v.push_back(std::move(f));
  return v;
}

}  // namespace tensormorph
