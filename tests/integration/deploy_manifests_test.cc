// The Kubernetes manifests in deploy/k8s against the `baton` binary they run: every flag a
// container passes is one its command accepts (so the manifests cannot drift from the CLI), each
// worker's --port is its gRPC containerPort, and the routers the workers register with are the
// pods of a headless Service of these manifests on that port; the routers run as replicas with a
// disruption budget.
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_paths.h"
#include "yaml-cpp/yaml.h"

namespace baton {
namespace {

std::string BatonBinary() { return std::string(BATON_BINARY_DIR) + "/bin/baton"; }

// `baton COMMAND --help`, or "" when it does not exit 0.
std::string HelpOf(const std::string& command) {
  const std::string line = BatonBinary() + " " + command + " --help 2>&1";
  FILE* pipe = popen(line.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) out.append(buffer, n);
  return pclose(pipe) == 0 ? out : "";
}

struct Manifests {
  std::vector<YAML::Node> deployments;
  std::map<std::string, std::set<int>> service_ports;  // Service name -> ports
  std::set<std::string> headless_services;
  std::set<std::string> disruption_budgets;  // the component each PodDisruptionBudget selects
};

Manifests LoadManifests() {
  Manifests m;
  const std::filesystem::path dir = test_support::SourcePath("deploy/k8s");
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml" || entry.path().filename() == "kustomization.yaml") {
      continue;
    }
    for (const YAML::Node& doc : YAML::LoadAllFromFile(entry.path().string())) {
      const std::string kind = doc["kind"].as<std::string>();
      if (kind == "Deployment") m.deployments.push_back(doc);
      if (kind == "PodDisruptionBudget") {
        m.disruption_budgets.insert(doc["spec"]["selector"]["matchLabels"]
                                       ["app.kubernetes.io/component"]
                                           .as<std::string>());
      }
      if (kind == "Service") {
        if (doc["spec"]["clusterIP"] && doc["spec"]["clusterIP"].as<std::string>() == "None") {
          m.headless_services.insert(doc["metadata"]["name"].as<std::string>());
        }
        for (const YAML::Node& port : doc["spec"]["ports"]) {
          m.service_ports[doc["metadata"]["name"].as<std::string>()].insert(port["port"].as<int>());
        }
      }
    }
  }
  return m;
}

// "--name=value" -> ("name", "value"); "--name" -> ("name", "").
std::pair<std::string, std::string> SplitFlag(const std::string& arg) {
  const size_t eq = arg.find('=');
  return {arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2),
          eq == std::string::npos ? "" : arg.substr(eq + 1)};
}

TEST(DeployManifestsTest, EveryContainerFlagIsAcceptedByItsCommand) {
  const Manifests m = LoadManifests();
  ASSERT_EQ(m.deployments.size(), 3u) << "router, prefill and decode";
  for (const YAML::Node& deployment : m.deployments) {
    const std::string name = deployment["metadata"]["name"].as<std::string>();
    for (const YAML::Node& container : deployment["spec"]["template"]["spec"]["containers"]) {
      const std::vector<std::string> args = container["args"].as<std::vector<std::string>>();
      ASSERT_FALSE(args.empty()) << name;
      const std::string help = HelpOf(args[0]);
      ASSERT_FALSE(help.empty()) << name << ": `baton " << args[0] << " --help` failed";
      for (size_t i = 1; i < args.size(); ++i) {
        ASSERT_EQ(args[i].rfind("--", 0), 0u) << name << ": argument '" << args[i] << "'";
        const std::string flag = SplitFlag(args[i]).first;
        EXPECT_NE(help.find("  --" + flag + " "), std::string::npos)
            << name << ": `baton " << args[0] << "` has no flag --" << flag;
      }
    }
  }
}

TEST(DeployManifestsTest, WorkersListenOnTheirPortAndRegisterWithEveryRouterReplica) {
  const Manifests m = LoadManifests();
  int workers = 0;
  for (const YAML::Node& deployment : m.deployments) {
    const YAML::Node container = deployment["spec"]["template"]["spec"]["containers"][0];
    const std::vector<std::string> args = container["args"].as<std::vector<std::string>>();
    std::map<std::string, std::string> flags;
    for (size_t i = 1; i < args.size(); ++i) flags.insert(SplitFlag(args[i]));
    std::map<std::string, int> container_ports;
    for (const YAML::Node& port : container["ports"]) {
      container_ports[port["name"].as<std::string>()] = port["containerPort"].as<int>();
    }
    ASSERT_TRUE(flags.contains("port")) << args[0];
    EXPECT_EQ(std::stoi(flags["port"]), container_ports["grpc"]) << args[0];
    EXPECT_EQ(flags["host"], "0.0.0.0") << args[0] << " must listen beyond the pod's loopback";
    if (args[0] == "router") {
      // Replicas, of which a drain takes one at a time.
      EXPECT_GE(deployment["spec"]["replicas"].as<int>(), 2);
      EXPECT_TRUE(m.disruption_budgets.contains("router"));
      continue;
    }
    ++workers;
    EXPECT_EQ(flags["advertise"], "$(POD_IP):" + flags["port"]) << args[0];
    // Every router: a headless Service's name, which resolves to each router pod.
    std::string router = flags["router"];
    ASSERT_TRUE(router.starts_with("dns:")) << args[0] << ": --router " << router;
    router = router.substr(4);
    const size_t colon = router.rfind(':');
    ASSERT_NE(colon, std::string::npos) << args[0] << ": --router " << router;
    const std::string service = router.substr(0, colon);
    ASSERT_TRUE(m.service_ports.contains(service)) << args[0] << ": no Service " << service;
    EXPECT_TRUE(m.headless_services.contains(service)) << service << " must be headless";
    EXPECT_TRUE(m.service_ports.at(service).contains(std::stoi(router.substr(colon + 1))))
        << args[0] << ": Service " << service << " has no port " << router.substr(colon + 1);
  }
  EXPECT_EQ(workers, 2);
}

}  // namespace
}  // namespace baton
