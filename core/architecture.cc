#include "core/architecture.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace tensormorph {
namespace {

// The tree as it is built: children found by name in constant time (a
// linear search per segment made a checkpoint of 150,000 sibling tensors
// quadratic: minutes of a worker), then moved into ArchNodes.
struct Builder {
  ArchNode node;  // without children
  absl::flat_hash_map<std::string, std::unique_ptr<Builder>> children;
};

Builder* Child(Builder* b, const std::string& name) {
  std::unique_ptr<Builder>& c = b->children[name];
  if (c == nullptr) {
    c = std::make_unique<Builder>();
    c->node.name = name;
    c->node.path = b->node.path.empty() ? name : b->node.path + "." + name;
  }
  return c.get();
}

ArchNode Build(Builder&& b) {
  ArchNode n = std::move(b.node);
  n.children.reserve(b.children.size());
  for (auto& [name, c] : b.children) n.children.push_back(Build(std::move(*c)));
  return n;
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
  Builder root;
  for (const LogicalTensor& t : ckpt.tensors()) {
    int64_t bytes = 0;
    for (const StoredTensor* p : t.encoding->parts())
      bytes += static_cast<int64_t>(p->nbytes);
    const std::string& scheme = t.encoding->info().scheme;
    std::vector<std::string> parts = absl::StrSplit(t.name, '.');
    Builder* n = &root;
    auto add = [&](Builder* b) {
      ArchNode* node = &b->node;
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
  ArchNode tree = Build(std::move(root));
  Finish(&tree, "");
  return tree;
}

}  // namespace tensormorph
