// Workers found by name: new addresses become static workers, vanished ones drain.
#include "router/worker_discovery.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fake_clock.h"

namespace baton::router {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

constexpr char kFingerprint[] = "0123456789abcdef0123456789abcdef";

v1::ModelIdentity Model() {
  v1::ModelIdentity m;
  m.set_fingerprint(kFingerprint);
  m.set_block_size(16);
  return m;
}

v1::WorkerLoad Load(int32_t running_sequences) {
  v1::WorkerLoad load;
  load.set_kv_blocks_free(100);
  load.set_kv_blocks_total(100);
  load.set_running_sequences(running_sequences);
  return load;
}

class WorkerDiscoveryTest : public ::testing::Test {
 protected:
  WorkerDiscoveryTest()
      : registry_(WorkerRegistryOptions{.model_fingerprint = kFingerprint, .clock = &clock_}) {}

  // A discovery of decode workers named "dns:decode:7200", which resolves to `addresses_` (or
  // fails with `error_`).
  std::unique_ptr<WorkerDiscovery> MakeDiscovery() {
    absl::StatusOr<rpc::AddressSpec> spec = rpc::ParseAddressSpec("--decode", "dns:decode:7200");
    EXPECT_TRUE(spec.ok()) << spec.status();
    return std::make_unique<WorkerDiscovery>(
        &registry_,
        WorkerDiscoveryOptions{
            .sources = {{.role = v1::WORKER_ROLE_DECODE, .spec = *spec, .flag = "--decode"}},
            .resolve =
                [this](const WorkerSource& source) -> absl::StatusOr<std::vector<std::string>> {
              EXPECT_EQ(source.spec.dns_name, "decode");
              if (!error_.ok()) return error_;
              return addresses_;
            }});
  }

  // Every worker the registry knows: address -> draining.
  std::map<std::string, bool> Known() {
    std::map<std::string, bool> out;
    for (const WorkerSnapshot& w : registry_.Snapshot()) out[w.address] = w.draining;
    return out;
  }

  // Answers every static worker's poll with `running` sequences running.
  void AnswerPolls(int32_t running) {
    for (const WorkerSnapshot& w : registry_.StaticWorkers()) {
      ASSERT_TRUE(registry_.ReportStatic(w.id, w.role, Model(), Load(running)).ok());
    }
  }

  test_support::FakeClock clock_;
  WorkerRegistry registry_;
  std::vector<std::string> addresses_;
  absl::Status error_;
};

TEST_F(WorkerDiscoveryTest, AddressesThatAppearBecomeWorkersOfTheSourcesRole) {
  auto discovery = MakeDiscovery();
  addresses_ = {"10.0.0.1:7200", "10.0.0.2:7200"};
  discovery->ResolveOnce();
  EXPECT_THAT(Known(), ElementsAre(Pair("10.0.0.1:7200", false), Pair("10.0.0.2:7200", false)));
  for (const WorkerSnapshot& w : registry_.StaticWorkers()) {
    EXPECT_EQ(w.role, v1::WORKER_ROLE_DECODE);
  }
  discovery->ResolveOnce();  // the same answer: the same workers
  EXPECT_EQ(registry_.Snapshot().size(), 2u);
}

TEST_F(WorkerDiscoveryTest, AnAddressThatLeavesIsDrainedNotCutOff) {
  auto discovery = MakeDiscovery();
  addresses_ = {"10.0.0.1:7200", "10.0.0.2:7200"};
  discovery->ResolveOnce();
  AnswerPolls(/*running=*/3);

  addresses_ = {"10.0.0.2:7200"};
  discovery->ResolveOnce();
  // Still running its sequences: known, draining, never placed on.
  EXPECT_THAT(Known(), ElementsAre(Pair("10.0.0.1:7200", true), Pair("10.0.0.2:7200", false)));
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<Placement> p = registry_.PickDecode(16, 1);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->address, "10.0.0.2:7200");
  }
  AnswerPolls(/*running=*/0);  // its requests are done: forgotten
  EXPECT_THAT(Known(), ElementsAre(Pair("10.0.0.2:7200", false)));
}

TEST_F(WorkerDiscoveryTest, AnAddressThatComesBackBeforeItIsIdleServesAgain) {
  auto discovery = MakeDiscovery();
  addresses_ = {"10.0.0.1:7200"};
  discovery->ResolveOnce();
  AnswerPolls(/*running=*/1);
  addresses_ = {};
  discovery->ResolveOnce();
  EXPECT_THAT(Known(), ElementsAre(Pair("10.0.0.1:7200", true)));
  addresses_ = {"10.0.0.1:7200"};
  discovery->ResolveOnce();
  EXPECT_THAT(Known(), ElementsAre(Pair("10.0.0.1:7200", false)));
  EXPECT_TRUE(registry_.PickDecode(16, 1).ok());
}

TEST_F(WorkerDiscoveryTest, AFailedResolutionKeepsTheWorkersFoundBefore) {
  auto discovery = MakeDiscovery();
  addresses_ = {"10.0.0.1:7200"};
  discovery->ResolveOnce();
  AnswerPolls(/*running=*/0);
  error_ = absl::UnavailableError("--decode 'dns:decode:7200': decode does not resolve");
  discovery->ResolveOnce();
  EXPECT_THAT(Known(), ElementsAre(Pair("10.0.0.1:7200", false)));
  EXPECT_TRUE(registry_.PickDecode(16, 1).ok());
}

TEST_F(WorkerDiscoveryTest, StartResolvesAtOnceAndThenEveryInterval) {
  absl::StatusOr<rpc::AddressSpec> spec = rpc::ParseAddressSpec("--prefill", "dns:localhost:7100");
  ASSERT_TRUE(spec.ok()) << spec.status();
  WorkerDiscovery discovery(
      &registry_,
      WorkerDiscoveryOptions{
          .sources = {{.role = v1::WORKER_ROLE_PREFILL, .spec = *spec, .flag = "--prefill"}},
          .interval = absl::Milliseconds(10)});
  discovery.Start();  // the real resolver: localhost
  std::map<std::string, bool> known = Known();
  EXPECT_TRUE(known.contains("127.0.0.1:7100"));
  discovery.Stop();
}

}  // namespace
}  // namespace baton::router
