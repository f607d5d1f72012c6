#include "tests/support/loopback_server.h"

#include <cstdio>
#include <cstdlib>

namespace tensormorph::testing {

LoopbackServer StartLoopbackServer(const std::vector<std::string>& roots,
                                   int workers,
                                   const ClientOptions& client_options) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.roots = roots;
  o.workers = workers;
  auto server = TensormorphServer::Start(o);
  if (!server.ok()) {
    std::fprintf(stderr, "loopback server: %s\n",
                 server.status().ToString().c_str());
    std::abort();
  }
  LoopbackServer s;
  s.server = *std::move(server);
  s.address = "127.0.0.1:" + std::to_string(s.server->port());
  s.client = *Client::Connect(s.address, client_options);
  return s;
}

}  // namespace tensormorph::testing
