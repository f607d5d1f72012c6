#include "server/kept_results.h"

namespace tensormorph {
namespace {

void AddInputs(const Checkpoint& c, KeptInputs* out) {
  for (const Checkpoint::File& f : c.files()) {
    std::optional<FileIdentity> id;
    if (f.mapping != nullptr) id = f.mapping->identity();
    out->emplace_back(f.path, id);
  }
  for (const Checkpoint::ReadFile& f : c.read_files()) {
    out->emplace_back(f.path, f.identity);
  }
}

}  // namespace

KeptInputs InputsOf(const Checkpoint& a, const Checkpoint& b) {
  KeptInputs out;
  AddInputs(a, &out);
  AddInputs(b, &out);
  return out;
}

}  // namespace tensormorph
