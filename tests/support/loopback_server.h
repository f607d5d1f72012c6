// A real tensormorph service in this process, listening on a free loopback
// port, and a real client connected to it over gRPC: what server tests and
// benchmarks talk to.
#ifndef TENSORMORPH_TESTS_SUPPORT_LOOPBACK_SERVER_H_
#define TENSORMORPH_TESTS_SUPPORT_LOOPBACK_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "server/server.h"

namespace tensormorph::testing {

struct LoopbackServer {
  std::unique_ptr<TensormorphServer> server;
  std::unique_ptr<Client> client;
  std::string address;  // "127.0.0.1:PORT", for more clients
};

// Serves `roots` on 127.0.0.1:0 with `workers` pool threads (0: the default)
// and connects a client with `client_options`. Aborts the program when the
// server cannot start: nothing after it could run.
LoopbackServer StartLoopbackServer(const std::vector<std::string>& roots,
                                   int workers = 0,
                                   const ClientOptions& client_options = {});

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_LOOPBACK_SERVER_H_
