#include "core/architecture.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace tensormorph {
namespace {

ArchNode* Child(ArchNode* n, const std::string& name) {
  for (ArchNode& c : n->children) {
    if (c.name == name) return &c;
  }
  ArchNode c;
  c.name = name;
  c.path = n->path.empty() ? name : n->path + "." + name;
  n->children.push_back(std::move(c));
  return &n->children.back();
}

bool NameLess(const ArchNode& a, const ArchNode& b) {
  int64_t x, y;
  const bool nx = absl::SimpleAtoi(a.name, &x),
             ny = absl::SimpleAtoi(b.name, &y);
  if (nx && ny) return x < y;
  if (nx != ny) return nx;
  return a.name < b.name;
}

void Finish(ArchNode* n, const std::string& parent_scheme) {
  int64_t best = -1;
  for (const auto& [scheme, params] : n->scheme_params) {
    if (params > best) {
      best = params;
      n->scheme = scheme;
    }
  }
  n->boundary = !parent_scheme.empty() && n->scheme != parent_scheme;
  std::sort(n->children.begin(), n->children.end(), NameLess);
  for (ArchNode& c : n->children) Finish(&c, n->scheme);
}

}  // namespace

ArchNode BuildArchitecture(const Checkpoint& ckpt) {
  ArchNode root;
  root.name = "";
  for (const LogicalTensor& t : ckpt.tensors()) {
    int64_t bytes = 0;
    for (const StoredTensor* p : t.encoding->parts())
      bytes += static_cast<int64_t>(p->nbytes);
    const std::string& scheme = t.encoding->info().scheme;
    std::vector<std::string> parts = absl::StrSplit(t.name, '.');
    ArchNode* n = &root;
    auto add = [&](ArchNode* node) {
      node->params += t.num_elements;
      node->bytes += bytes;
      node->tensors += 1;
      node->scheme_params[scheme] += t.num_elements;
    };
    add(n);
    for (const std::string& part : parts) {
      n = Child(n, part);
      add(n);
    }
  }
  Finish(&root, "");
  return root;
}

}  // namespace tensormorph
