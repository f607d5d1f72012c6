// A throwaway certificate authority for TLS tests, made once per process
// with Debian's openssl: a CA, and a server and a client certificate it
// signed for localhost and 127.0.0.1.
#ifndef TENSORMORPH_TESTS_SUPPORT_TEST_CA_H_
#define TENSORMORPH_TESTS_SUPPORT_TEST_CA_H_

#include <string>

namespace tensormorph::testing {

// The path of one of its files: ca.pem, server.pem, server.key,
// client.pem, client.key. Aborts when openssl fails (no TLS test could run).
std::string TestCaFile(const std::string& name);

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_TEST_CA_H_
