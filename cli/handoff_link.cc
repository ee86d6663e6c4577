#include "cli/handoff_link.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/link_spec.h"

namespace baton::cli {

void PlaceAcrossLink(const PdNamespaces& namespaces, const std::string& link,
                     bench::HandoffBenchOptions& options) {
  options.router_placement.listen = {"--host", namespaces.router_host(), "--port", "0"};
  options.prefill_placement = {
      .prefix = PdNamespaces::ExecPrefix(namespaces.prefill_namespace()),
      .listen = {"--host", namespaces.prefill_host(), "--port", "0"}};
  const std::string port = std::to_string(PdNamespaces::kFirstDecodePort);
  options.decode_placement = {
      .prefix = PdNamespaces::ExecPrefix(namespaces.decode_namespace()),
      .listen = {"--host", "0.0.0.0", "--port", port, "--advertise",
                 absl::StrCat(namespaces.decode_host(), ":", port)}};
  options.link = link;
}

absl::StatusOr<std::vector<std::string>> ParseLinkSweep(const std::string& text) {
  std::vector<std::string> links;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    const std::string link(item);
    absl::StatusOr<LinkSpec> spec = ParseLinkSpec(link, "--link-sweep");
    if (!spec.ok()) return spec.status();
    links.push_back(link);
  }
  return links;
}

}  // namespace baton::cli
