#include "rpc/address_spec.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "rpc/kubernetes_endpoints.h"

namespace baton::rpc {
namespace {

// "ip:port" / "[ip6]:port" of a resolved address.
std::string AddressText(const sockaddr* a, int port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr, text, sizeof(text));
    return absl::StrCat("[", text, "]:", port);
  }
  inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, text, sizeof(text));
  return absl::StrCat(text, ":", port);
}

// Whether `a` is HOST:PORT with a port in [1, 65535]; its parts into `host` and `port`.
bool SplitHostPort(absl::string_view a, absl::string_view* host, int* port) {
  const size_t colon = a.rfind(':');
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(a.substr(colon + 1), port) || *port <= 0 || *port > 65535) {
    return false;
  }
  *host = a.substr(0, colon);
  return true;
}

// A DNS-1123 label, as Kubernetes names Services and namespaces.
bool IsDnsLabel(absl::string_view s) {
  if (s.empty() || s.size() > 63 || s.front() == '-' || s.back() == '-') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

// A port number, or a port's name as Kubernetes allows it (IANA_SVC_NAME).
bool IsPortOrName(absl::string_view s) {
  int number = 0;
  if (absl::SimpleAtoi(s, &number)) return number > 0 && number <= 65535;
  return s.size() <= 15 && IsDnsLabel(s) &&
         std::any_of(s.begin(), s.end(), [](char c) { return c >= 'a' && c <= 'z'; });
}

// "SERVICE[.NAMESPACE]:PORT" into `out`; false when malformed.
bool ParseKubernetesService(absl::string_view rest, AddressSpec& out) {
  const size_t colon = rest.rfind(':');
  if (colon == absl::string_view::npos) return false;
  absl::string_view name = rest.substr(0, colon);
  const absl::string_view port = rest.substr(colon + 1);
  absl::string_view ns;
  if (const size_t dot = name.find('.'); dot != absl::string_view::npos) {
    ns = name.substr(dot + 1);
    name = name.substr(0, dot);
    if (!IsDnsLabel(ns)) return false;
  }
  if (!IsDnsLabel(name) || !IsPortOrName(port)) return false;
  out.k8s_service = std::string(name);
  out.k8s_namespace = std::string(ns);
  out.k8s_port = std::string(port);
  return true;
}

void AddOnce(std::vector<std::string>& addresses, std::string address) {
  if (std::find(addresses.begin(), addresses.end(), address) == addresses.end()) {
    addresses.push_back(std::move(address));
  }
}

}  // namespace

absl::StatusOr<AddressSpec> ParseAddressSpec(absl::string_view flag, const std::string& spec) {
  AddressSpec out;
  out.text = spec;
  absl::string_view rest = spec;
  absl::string_view host;
  int port = 0;
  if (absl::ConsumePrefix(&rest, "k8s:")) {
    if (!ParseKubernetesService(rest, out)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " '", spec,
                       "': a k8s: spec is k8s:SERVICE[.NAMESPACE]:PORT (lowercase names; a port "
                       "number or name)"));
    }
    return out;
  }
  if (absl::ConsumePrefix(&rest, "dns:")) {
    if (!SplitHostPort(rest, &host, &port)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " '", spec, "': a dns: spec is dns:NAME:PORT"));
    }
    out.dns_name = std::string(host);
    out.dns_port = port;
    return out;
  }
  for (absl::string_view a : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    a = absl::StripAsciiWhitespace(a);
    if (!SplitHostPort(a, &host, &port)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " '", spec, "': '", a, "' is not HOST:PORT"));
    }
    AddOnce(out.list, std::string(a));
  }
  if (out.list.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", spec, "' names no address"));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ResolveAddresses(absl::string_view flag,
                                                          const AddressSpec& spec) {
  if (spec.is_k8s()) {
    absl::StatusOr<KubernetesApi> api = KubernetesApi::InCluster();
    absl::StatusOr<std::vector<std::string>> addresses =
        api.ok() ? ResolveEndpointSlices(*api, spec.k8s_service, spec.k8s_namespace, spec.k8s_port)
                 : api.status();
    if (addresses.ok()) return addresses;
    return absl::Status(addresses.status().code(),
                        absl::StrCat(flag, " '", spec.text, "': ", addresses.status().message()));
  }
  if (!spec.is_dns()) return spec.list;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int e = getaddrinfo(spec.dns_name.c_str(), nullptr, &hints, &found); e != 0) {
    return absl::UnavailableError(absl::StrCat(flag, " '", spec.text, "': ", spec.dns_name,
                                               " does not resolve: ", gai_strerror(e)));
  }
  std::vector<std::string> addresses;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    AddOnce(addresses, AddressText(a->ai_addr, spec.dns_port));
  }
  freeaddrinfo(found);
  std::sort(addresses.begin(), addresses.end());
  return addresses;
}

absl::StatusOr<std::vector<std::string>> ResolveAddressSpec(absl::string_view flag,
                                                            const std::string& spec) {
  absl::StatusOr<AddressSpec> parsed = ParseAddressSpec(flag, spec);
  if (!parsed.ok()) return parsed.status();
  return ResolveAddresses(flag, *parsed);
}

}  // namespace baton::rpc
