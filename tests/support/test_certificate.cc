#include "tests/support/test_certificate.h"

#include <cstdlib>

#include "absl/status/status.h"

namespace baton::test_support {

absl::StatusOr<TestCertificate> MakeTestCertificate(const std::string& prefix) {
  TestCertificate out{.cert = prefix + "cert.pem", .key = prefix + "key.pem"};
  const std::string command =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " +
      out.key + " -out " + out.cert + " 2>/dev/null";
  if (std::system(command.c_str()) != 0) {
    return absl::FailedPreconditionError("openssl is needed to make a test certificate");
  }
  return out;
}

}  // namespace baton::test_support
