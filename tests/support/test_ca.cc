#include "tests/support/test_ca.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph::testing {
namespace {

std::string MakeCa() {
  const std::string d = MakeTempDir();
  WriteFile(d + "/san.ext", "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
  const auto run = [](const std::vector<std::string>& argv) {
    const CommandResult r = RunCommand(argv);
    if (r.exit_code != 0) {
      std::fprintf(stderr, "openssl failed making the test CA: %s\n",
                   r.err.c_str());
      std::abort();
    }
  };
  run({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
       "-keyout", d + "/ca.key", "-out", d + "/ca.pem", "-days", "1", "-subj",
       "/CN=tensormorph-test-ca"});
  for (const std::string who : {"server", "client"}) {
    run({"/usr/bin/openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout",
         d + "/" + who + ".key", "-out", d + "/" + who + ".csr", "-subj",
         "/CN=localhost"});
    run({"/usr/bin/openssl", "x509", "-req", "-in", d + "/" + who + ".csr",
         "-CA", d + "/ca.pem", "-CAkey", d + "/ca.key", "-CAcreateserial",
         "-out", d + "/" + who + ".pem", "-days", "1", "-extfile",
         d + "/san.ext"});
  }
  return d;
}

}  // namespace

std::string TestCaFile(const std::string& name) {
  static const std::string* dir = new std::string(MakeCa());
  return *dir + "/" + name;
}

}  // namespace tensormorph::testing
