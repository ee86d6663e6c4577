#include "cli/cluster_config.h"

#include <fstream>
#include <iterator>
#include <set>

#include "absl/strings/str_cat.h"
#include "cli/link_spec.h"
#include "kernels/cpu/quantize.h"
#include "kernels/device.h"
#include "yaml-cpp/yaml.h"

namespace baton::cli {
namespace {

absl::Status Error(const std::string& origin, const YAML::Node& node, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(origin, ":", node.Mark().line + 1, ": ", what));
}

absl::Status CheckKeys(const std::string& origin, const YAML::Node& map,
                       const std::set<std::string>& known, const std::string& where) {
  if (!map.IsMap()) return Error(origin, map, absl::StrCat(where, " must be a mapping"));
  for (const auto& entry : map) {
    const std::string key = entry.first.as<std::string>();
    if (!known.contains(key)) {
      return Error(origin, entry.first, absl::StrCat("unknown key '", key, "' in ", where));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ProcessConfig> ParseProcess(const std::string& origin, const YAML::Node& node,
                                           const std::string& where) {
  ProcessConfig p;
  if (node.IsNull()) return p;
  std::set<std::string> known = {"port", "threads", "cpus", "kv_cache_memory", "args"};
  if (where == "router") {
    known.insert({"http_port", "replicas"});
  } else {
    known.insert({"device", "tensor_parallel"});
  }
  if (absl::Status s = CheckKeys(origin, node, known, where); !s.ok()) return s;
  try {
    if (node["port"]) p.port = node["port"].as<int>();
    if (node["http_port"]) p.http_port = node["http_port"].as<int>();
    if (node["replicas"]) p.replicas = node["replicas"].as<int>();
    if (node["threads"]) p.threads = node["threads"].as<int>();
    if (node["tensor_parallel"]) p.tensor_parallel = node["tensor_parallel"].as<int>();
    if (node["device"]) p.device = node["device"].as<std::string>();
    if (node["cpus"]) p.cpus = node["cpus"].as<std::vector<int>>();
    if (node["kv_cache_memory"]) p.kv_cache_memory = node["kv_cache_memory"].as<std::string>();
    if (node["args"]) p.extra_args = node["args"].as<std::vector<std::string>>();
  } catch (const YAML::Exception& e) {
    return Error(origin, node, absl::StrCat(where, ": ", e.what()));
  }
  if (p.port < 0 || p.port > 65535) {
    return Error(origin, node["port"], absl::StrCat(where, ": port ", p.port, " out of range"));
  }
  if (p.http_port < 0 || p.http_port > 65535) {
    return Error(origin, node["http_port"],
                 absl::StrCat(where, ": http_port ", p.http_port, " out of range"));
  }
  if (p.threads < 0) return Error(origin, node["threads"], absl::StrCat(where, ": negative threads"));
  if (p.tensor_parallel < 1 || p.tensor_parallel > 64) {
    return Error(origin, node["tensor_parallel"],
                 absl::StrCat(where, ": tensor_parallel ", p.tensor_parallel,
                              " is not within 1..64"));
  }
  if (p.replicas < 1 || p.replicas > 16) {
    return Error(origin, node["replicas"],
                 absl::StrCat(where, ": replicas ", p.replicas, " is not within 1..16"));
  }
  if (!p.device.empty()) {
    if (absl::Status s = kernels::ParseDevice(p.device).status(); !s.ok()) {
      return Error(origin, node["device"], absl::StrCat(where, ": ", s.message()));
    }
  }
  for (int cpu : p.cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      return Error(origin, node["cpus"], absl::StrCat(where, ": cpu ", cpu, " out of range"));
    }
  }
  return p;
}

absl::StatusOr<std::vector<ProcessConfig>> ParseList(const std::string& origin,
                                                     const YAML::Node& node,
                                                     const std::string& key) {
  std::vector<ProcessConfig> list;
  if (!node) return list;
  if (!node.IsSequence()) return Error(origin, node, absl::StrCat("'", key, "' must be a list"));
  for (size_t i = 0; i < node.size(); ++i) {
    absl::StatusOr<ProcessConfig> p = ParseProcess(origin, node[i], absl::StrCat(key, "[", i, "]"));
    if (!p.ok()) return p.status();
    list.push_back(*p);
  }
  return list;
}

}  // namespace

ClusterConfig DefaultClusterConfig() {
  ClusterConfig c;
  c.prefill.push_back({});
  c.decode.push_back({});
  return c;
}

absl::StatusOr<ClusterConfig> ParseClusterConfig(const std::string& yaml_text,
                                                 const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", e.what()));
  }
  ClusterConfig c;
  if (absl::Status s = CheckKeys(origin, root,
                                 {"model", "quantize", "host", "token", "token_file", "router", "prefill",
                                  "decode", "colocated", "link"},
                                 "the cluster file");
      !s.ok()) {
    return s;
  }
  try {
    if (root["model"]) c.model = root["model"].as<std::string>();
    if (root["quantize"]) c.quantize = root["quantize"].as<std::string>();
    if (root["host"]) c.host = root["host"].as<std::string>();
    if (root["token"]) c.token = root["token"].as<std::string>();
    if (root["token_file"]) c.token_file = root["token_file"].as<std::string>();
    if (root["link"]) c.link = root["link"].as<std::string>();
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", e.what()));
  }
  if (root["link"]) {
    absl::StatusOr<LinkSpec> link = ParseLinkSpec(
        c.link, absl::StrCat(origin, ":", root["link"].Mark().line + 1, ": link"));
    if (!link.ok()) return link.status();
  }
  if (!c.quantize.empty() && !kernels::QuantizableTypeNamed(c.quantize)) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ":", root["quantize"].Mark().line + 1, ": quantize: '", c.quantize,
                     "' is not a type baton quantizes to (q8_0, q4_k, q6_k, ...)"));
  }
  if (!c.token.empty() && !c.token_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": give the shared token as 'token' or 'token_file', not both"));
  }
  if (root["router"]) {
    absl::StatusOr<ProcessConfig> router = ParseProcess(origin, root["router"], "router");
    if (!router.ok()) return router.status();
    c.router = *router;
  }
  for (auto [key, list] : {std::pair{"prefill", &c.prefill}, std::pair{"decode", &c.decode},
                            std::pair{"colocated", &c.colocated}}) {
    absl::StatusOr<std::vector<ProcessConfig>> parsed = ParseList(origin, root[key], key);
    if (!parsed.ok()) return parsed.status();
    *list = *parsed;
  }
  const bool can_prefill = !c.prefill.empty() || !c.colocated.empty();
  const bool can_decode = !c.decode.empty() || !c.colocated.empty();
  if (!can_prefill || !can_decode) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": the cluster needs a worker that prefills (prefill or colocated) and one that "
                "decodes (decode or colocated)"));
  }
  return c;
}

absl::StatusOr<ClusterConfig> LoadClusterConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read cluster file '", path, "'"));
  return ParseClusterConfig(std::string(std::istreambuf_iterator<char>(in), {}), path);
}

}  // namespace baton::cli
