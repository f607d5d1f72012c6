// consumer TARGET CHECKPOINT: connects to a tensormorphd through the
// installed Tensormorph::client and prints the server's version and the
// checkpoint's tensors, one "tensor <name>" a line, then "count <n>".
#include <cstdio>

#include "tensormorph/client/client.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s HOST:PORT CHECKPOINT\n", argv[0]);
    return 1;
  }
  auto client = tensormorph::Client::Connect(argv[1]);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 2;
  }
  auto info = (*client)->GetServerInfo();
  if (!info.ok()) {
    std::fprintf(stderr, "GetServerInfo: %s\n",
                 info.status().ToString().c_str());
    return 2;
  }
  std::printf("version %s\n", info->version().c_str());
  auto tensors = (*client)->ListTensors(argv[2]);
  if (!tensors.ok()) {
    std::fprintf(stderr, "ListTensors: %s\n",
                 tensors.status().ToString().c_str());
    return 2;
  }
  for (const auto& tensor : *tensors) {
    std::printf("tensor %s\n", tensor.name().c_str());
  }
  std::printf("count %zu\n", tensors->size());
  return 0;
}
