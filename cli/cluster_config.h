// A local cluster description for `baton up` (YAML, see deploy/local/cluster.yaml): the router
// and N prefill, M decode and K colocated worker processes, each with optional port, threads, CPU
// pinning and KV cache size, workers with the device they run on (`device: cuda:1`) and their
// tensor-parallel size (`tensor_parallel: 2`); the router also with the port of its HTTP API
// (http_port); and optionally `link: RATE[,DELAY]`, an emulated prefill <-> decode link
// (cli/network_namespaces.h).
//
// Thread-safety: plain value types.
#ifndef BATON_CLI_CLUSTER_CONFIG_H_
#define BATON_CLI_CLUSTER_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::cli {

struct ProcessConfig {
  int port = 0;                    // 0: any free port
  int threads = 0;                 // 0: default
  int tensor_parallel = 1;         // workers: ranks of tensor parallelism (--tensor-parallel)
  std::string device;              // workers: cpu, cuda or cuda:N; empty: cpu
  std::vector<int> cpus;           // empty: no pinning
  std::string kv_cache_memory;     // e.g. "256M"; empty: default
  std::vector<std::string> extra_args;  // passed through verbatim
  int http_port = 0;               // router only: its OpenAI-compatible HTTP API (0: any free port)
  // router only: how many routers serve the same workers (docs/DESIGN.md, "Routers as
  // replicas"); the first takes port and http_port, the others free ones.
  int replicas = 1;
};

struct ClusterConfig {
  std::string model;               // empty: the default model
  std::string quantize;            // every process quantizes the checkpoint so; empty: as stored
  std::string host = "127.0.0.1";
  std::string token;               // shared token for every process; empty: none
  std::string token_file;          // or the file that holds it (keeps it out of the cluster file)
  ProcessConfig router;
  std::vector<ProcessConfig> prefill;
  std::vector<ProcessConfig> decode;
  std::vector<ProcessConfig> colocated;
  std::string link;                // emulated P<->D link (cli/link_spec.h); empty: plain loopback
};

// The built-in default: 1 prefill + 1 decode worker on 127.0.0.1.
ClusterConfig DefaultClusterConfig();

// Parses a YAML file. INVALID_ARGUMENT naming the key (and line) for anything malformed: unknown
// keys, wrong types, ports outside [0, 65535], no worker that can prefill or none that can decode.
absl::StatusOr<ClusterConfig> LoadClusterConfig(const std::string& path);
absl::StatusOr<ClusterConfig> ParseClusterConfig(const std::string& yaml_text,
                                                 const std::string& origin);

}  // namespace baton::cli

#endif  // BATON_CLI_CLUSTER_CONFIG_H_
