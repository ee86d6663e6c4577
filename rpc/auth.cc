#include "rpc/auth.h"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpc/grpc.h"
#include "grpc/grpc_security.h"

namespace baton::rpc {
namespace {

absl::string_view SliceView(const grpc_slice& slice) {
  return absl::string_view(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(slice)),
                           GRPC_SLICE_LENGTH(slice));
}

// The processor's state: the expected token. Owned by the core credentials (freed by Destroy).
struct TokenCheck {
  std::string token;

  // Runs for every call before its handler; answers at once (never blocks).
  static void Process(void* state, grpc_auth_context* /*context*/, const grpc_metadata* md,
                      size_t n_md, grpc_process_auth_metadata_done_cb done, void* user_data) {
    const std::string& token = static_cast<TokenCheck*>(state)->token;
    absl::string_view method;
    absl::string_view authorization;
    bool has_authorization = false;
    for (size_t i = 0; i < n_md; ++i) {
      const absl::string_view key = SliceView(md[i].key);
      if (key == ":path") method = SliceView(md[i].value);
      if (key == "authorization") {
        authorization = SliceView(md[i].value);
        has_authorization = true;
      }
    }
    const char* error = nullptr;
    if (MethodNeedsToken(method)) {
      constexpr absl::string_view kBearer = "Bearer ";
      if (!has_authorization) {
        error = "missing 'authorization: Bearer <token>' metadata";
      } else if (!absl::StartsWith(authorization, kBearer) ||
                 !TokensEqual(authorization.substr(kBearer.size()), token)) {
        error = "invalid token";
      }
    }
    done(user_data, nullptr, 0, nullptr, 0,
         error == nullptr ? GRPC_STATUS_OK : GRPC_STATUS_UNAUTHENTICATED, error);
  }

  static void Destroy(void* state) { delete static_cast<TokenCheck*>(state); }
};

// grpc::ServerCredentials over C-core credentials, so that the token check can be installed on
// plaintext credentials too (gRPC 1.51's C++ InsecureServerCredentials refuses a processor).
// `override` on AddPortToServer makes a gRPC whose ServerCredentials changed fail to compile here
// rather than silently skip the check.
class CoreServerCredentials final : public grpc::ServerCredentials {
 public:
  // Takes ownership of `core`.
  explicit CoreServerCredentials(grpc_server_credentials* core) : core_(core) {}
  ~CoreServerCredentials() override { grpc_server_credentials_release(core_); }

  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>& /*processor*/) override {
    // Never called: MakeServerCredentials installs the token check on the core credentials.
  }

 private:
  int AddPortToServer(const std::string& address, grpc_server* server) override {
    return grpc_server_add_http2_port(server, address.c_str(), core_);
  }

  grpc_server_credentials* const core_;
};

absl::StatusOr<grpc_server_credentials*> MakeTlsCoreCredentials(const TlsFiles& tls) {
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key file");
  }
  absl::StatusOr<std::string> cert = ReadTlsFile(tls.cert_file, "TLS certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadTlsFile(tls.key_file, "TLS key");
  if (!key.ok()) return key.status();
  std::string ca;
  if (!tls.ca_file.empty()) {
    absl::StatusOr<std::string> read = ReadTlsFile(tls.ca_file, "TLS CA");
    if (!read.ok()) return read.status();
    ca = *std::move(read);
  }
  grpc_ssl_pem_key_cert_pair pair{key->c_str(), cert->c_str()};
  return grpc_ssl_server_credentials_create_ex(
      ca.empty() ? nullptr : ca.c_str(), &pair, 1,
      ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                 : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY,
      nullptr);
}

}  // namespace

absl::StatusOr<std::string> ReadTlsFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", what, " file '", path, "'"));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool MethodNeedsToken(absl::string_view method) {
  return !absl::StartsWith(method, "/grpc.health.v1.Health/") &&
         !absl::StartsWith(method, "/grpc.reflection.");
}

bool TokensEqual(absl::string_view presented, absl::string_view expected) {
  unsigned char diff = presented.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i) {
    diff |= static_cast<unsigned char>(presented[i] ^
                                       expected[i % std::max<size_t>(1, expected.size())]);
  }
  return diff == 0;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& tls, const std::string& auth_token) {
  grpc_init();  // the core credentials below need the library; balanced at the end
  grpc_server_credentials* core = nullptr;
  if (tls.enabled()) {
    absl::StatusOr<grpc_server_credentials*> made = MakeTlsCoreCredentials(tls);
    if (!made.ok()) {
      grpc_shutdown();
      return made.status();
    }
    core = *made;
  } else {
    core = grpc_insecure_server_credentials_create();
  }
  if (!auth_token.empty()) {
    grpc_server_credentials_set_auth_metadata_processor(
        core, {&TokenCheck::Process, &TokenCheck::Destroy, new TokenCheck{auth_token}});
  }
  auto credentials = std::make_shared<CoreServerCredentials>(core);
  grpc_shutdown();
  return credentials;
}

}  // namespace baton::rpc
