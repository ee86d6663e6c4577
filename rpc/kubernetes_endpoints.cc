#include "rpc/kubernetes_endpoints.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace baton::rpc {
namespace {

using json = nlohmann::json;

constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";
constexpr size_t kMaxAnswerBytes = size_t{16} << 20;
constexpr size_t kMaxTokenBytes = size_t{64} << 10;

// The file's first `limit` bytes; NOT_FOUND naming it when it cannot be read.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, " cannot be read"));
  std::string text(limit, '\0');
  in.read(text.data(), static_cast<std::streamsize>(limit));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

// `object[key]` when `object` is an object holding it, else null.
const json* Field(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// An array field's elements, or none.
const json& Elements(const json& object, const char* key) {
  static const json kNone = json::array();
  const json* field = Field(object, key);
  return field != nullptr && field->is_array() ? *field : kNone;
}

// The slice's port for `port` (a number, or a port's name); 0 when it has no port of that name.
int SlicePort(const json& slice, absl::string_view port) {
  int number = 0;
  if (absl::SimpleAtoi(port, &number)) return number;
  for (const json& p : Elements(slice, "ports")) {
    const json* name = Field(p, "name");
    const json* value = Field(p, "port");
    if (name != nullptr && name->is_string() && name->get<std::string>() == port &&
        value != nullptr && value->is_number_integer()) {
      return value->get<int>();
    }
  }
  return 0;
}

// Ready, or no ready condition at all (the API: "nil should be interpreted as ready").
bool Ready(const json& endpoint) {
  const json* conditions = Field(endpoint, "conditions");
  const json* ready = conditions != nullptr ? Field(*conditions, "ready") : nullptr;
  return ready == nullptr || !ready->is_boolean() || ready->get<bool>();
}

// The API's own message in an error answer (a Status object), else the answer's start.
std::string ErrorMessage(const std::string& body) {
  const json status = json::parse(body, nullptr, /*allow_exceptions=*/false);
  const json* message = Field(status, "message");
  if (message != nullptr && message->is_string()) return message->get<std::string>();
  return body.substr(0, 200);
}

}  // namespace

absl::StatusOr<KubernetesApi> KubernetesApi::InCluster() {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  KubernetesApi api;
  if (host == nullptr || *host == '\0' || port == nullptr || !absl::SimpleAtoi(port, &api.port)) {
    return absl::FailedPreconditionError(
        "not in a Kubernetes pod: KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT are not set");
  }
  api.host = host;
  api.token_file = absl::StrCat(kServiceAccountDir, "/token");
  api.ca_file = absl::StrCat(kServiceAccountDir, "/ca.crt");
  absl::StatusOr<std::string> ns = ReadSmallFile(absl::StrCat(kServiceAccountDir, "/namespace"),
                                                 /*limit=*/256);
  if (!ns.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no service account mounted in this pod (automountServiceAccountToken): ",
                     ns.status().message()));
  }
  api.namespace_name = std::string(absl::StripAsciiWhitespace(*ns));
  return api;
}

absl::StatusOr<std::vector<std::string>> ResolveEndpointSlices(const KubernetesApi& api,
                                                               absl::string_view service,
                                                               absl::string_view namespace_name,
                                                               absl::string_view port) {
  const std::string ns(namespace_name.empty() ? api.namespace_name : namespace_name);
  const std::string what = absl::StrCat("Service ", ns, "/", service);
  absl::StatusOr<std::string> token = ReadSmallFile(api.token_file, kMaxTokenBytes);
  if (!token.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": no service account token: ", token.status().message()));
  }
  httplib::SSLClient client(api.host, api.port);
  client.set_ca_cert_path(api.ca_file);
  client.enable_server_certificate_verification(true);
  const time_t seconds = std::max<time_t>(1, absl::ToInt64Seconds(api.timeout));
  client.set_connection_timeout(seconds);
  client.set_read_timeout(seconds);
  client.set_write_timeout(seconds);
  const httplib::Headers headers = {
      {"Authorization", absl::StrCat("Bearer ", absl::StripAsciiWhitespace(*token))},
      {"Accept", "application/json"}};
  // Names are DNS labels (rpc/address_spec.h checks them): nothing here needs escaping.
  const std::string path =
      absl::StrCat("/apis/discovery.k8s.io/v1/namespaces/", ns,
                   "/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3D", service);
  std::string body;
  bool too_large = false;
  const httplib::Result result = client.Get(path, headers, [&](const char* data, size_t n) {
    too_large = body.size() + n > kMaxAnswerBytes;
    if (!too_large) body.append(data, n);
    return !too_large;
  });
  const std::string api_address = absl::StrCat(api.host, ":", api.port);
  if (too_large) {
    return absl::UnavailableError(
        absl::StrCat(what, ": the Kubernetes API at ", api_address, " answered more than 16 MiB"));
  }
  if (!result) {
    return absl::UnavailableError(
        absl::StrCat(what, ": the Kubernetes API at ", api_address,
                     " cannot be reached: ", httplib::to_string(result.error())));
  }
  if (result->status != 200) {
    return absl::UnavailableError(absl::StrCat(what, ": the Kubernetes API answered HTTP ",
                                               result->status, ": ", ErrorMessage(body)));
  }
  absl::StatusOr<std::vector<std::string>> addresses = ReadyEndpointAddresses(body, port);
  if (!addresses.ok()) {
    return absl::Status(addresses.status().code(),
                        absl::StrCat(what, ": ", addresses.status().message()));
  }
  return addresses;
}

absl::StatusOr<std::vector<std::string>> ReadyEndpointAddresses(absl::string_view list_json,
                                                                absl::string_view port) {
  const json list = json::parse(list_json, nullptr, /*allow_exceptions=*/false);
  const json* items = Field(list, "items");
  if (items == nullptr || !items->is_array()) {
    return absl::InvalidArgumentError("the Kubernetes API's answer is not an EndpointSliceList");
  }
  std::vector<std::string> addresses;
  bool port_found = false;
  for (const json& slice : *items) {
    const int slice_port = SlicePort(slice, port);
    if (slice_port <= 0) continue;
    port_found = true;
    const json* type = Field(slice, "addressType");
    const bool ipv6 = type != nullptr && type->is_string() && type->get<std::string>() == "IPv6";
    for (const json& endpoint : Elements(slice, "endpoints")) {
      if (!Ready(endpoint)) continue;
      for (const json& ip : Elements(endpoint, "addresses")) {
        if (!ip.is_string()) continue;
        const std::string& text = ip.get_ref<const std::string&>();
        std::string address =
            ipv6 ? absl::StrCat("[", text, "]:", slice_port) : absl::StrCat(text, ":", slice_port);
        if (std::find(addresses.begin(), addresses.end(), address) == addresses.end()) {
          addresses.push_back(std::move(address));
        }
      }
    }
  }
  if (!port_found && !items->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no EndpointSlice of the Service has a port named '", port, "'"));
  }
  std::sort(addresses.begin(), addresses.end());
  return addresses;
}

}  // namespace baton::rpc
