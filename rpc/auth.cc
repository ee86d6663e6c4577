#include "rpc/auth.h"

namespace baton::rpc {

bool TokensEqual(const std::string& presented, const std::string& expected) {
  unsigned char diff = presented.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i) {
    diff |= static_cast<unsigned char>(presented[i] ^ expected[i % std::max<size_t>(1, expected.size())]);
  }
  return diff == 0;
}

grpc::Status CheckAuth(const grpc::ServerContextBase& context, const std::string& token) {
  if (token.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing 'authorization: Bearer <token>' metadata");
  }
  const std::string value(it->second.data(), it->second.size());
  constexpr char kPrefix[] = "Bearer ";
  if (value.rfind(kPrefix, 0) != 0 || !TokensEqual(value.substr(sizeof(kPrefix) - 1), token)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "invalid token");
  }
  return grpc::Status::OK;
}

}  // namespace baton::rpc
