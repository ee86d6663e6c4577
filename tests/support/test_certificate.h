// A self-signed TLS certificate for 127.0.0.1 and localhost, made with the openssl command line,
// for tests that serve or dial TLS on loopback.
#ifndef BATON_TESTS_SUPPORT_TEST_CERTIFICATE_H_
#define BATON_TESTS_SUPPORT_TEST_CERTIFICATE_H_

#include <string>

#include "absl/status/statusor.h"

namespace baton::test_support {

struct TestCertificate {
  std::string cert;  // PEM; being self-signed, also the CA that vouches for it
  std::string key;   // PEM, unencrypted
};

// Writes `prefix`cert.pem and `prefix`key.pem (valid for a day) and returns their paths.
// FAILED_PRECONDITION when openssl cannot make them.
absl::StatusOr<TestCertificate> MakeTestCertificate(const std::string& prefix);

}  // namespace baton::test_support

#endif  // BATON_TESTS_SUPPORT_TEST_CERTIFICATE_H_
