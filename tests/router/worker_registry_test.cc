#include "router/worker_registry.h"

#include <atomic>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fake_clock.h"
#include "tests/support/status_matchers.h"

namespace baton::router {
namespace {

using test_support::IsOkAndHolds;
using ::testing::HasSubstr;

// Matches an ok placement on the worker at `address`.
::testing::Matcher<const absl::StatusOr<Placement>&> PlacedOn(const std::string& address) {
  return IsOkAndHolds(::testing::Field(&Placement::address, address));
}

constexpr char kFingerprint[] = "0123456789abcdef0123456789abcdef";

v1::ModelIdentity Model(const std::string& fingerprint = kFingerprint, int32_t block_size = 16,
                        int32_t n_ctx = 0) {
  v1::ModelIdentity m;
  m.set_name("test");
  m.set_fingerprint(fingerprint);
  m.set_block_size(block_size);
  m.set_n_ctx(n_ctx);
  return m;
}

v1::WorkerLoad DecodeLoad(int32_t free, int32_t total = 1000) {
  v1::WorkerLoad load;
  load.set_kv_blocks_free(free);
  load.set_kv_blocks_total(total);
  return load;
}

v1::WorkerLoad PrefillLoad(int64_t queued) {
  v1::WorkerLoad load;
  load.set_queued_prompt_tokens(queued);
  return load;
}

class WorkerRegistryTest : public ::testing::Test {
 protected:
  std::unique_ptr<WorkerRegistry> MakeRegistry(
      PlacementPolicy policy = PlacementPolicy::kLeastLoaded) {
    return std::make_unique<WorkerRegistry>(WorkerRegistryOptions{
        .model_fingerprint = kFingerprint,
        .heartbeat_interval = absl::Milliseconds(500),
        .placement = policy,
        .clock = &clock_});
  }
  void Advance(absl::Duration d) { clock_.Advance(d); }

  test_support::FakeClock clock_;
};

TEST_F(WorkerRegistryTest, RegisteredWorkerExpiresWithoutHeartbeatsAndComesBack) {
  auto registry = MakeRegistry();
  EXPECT_EQ(registry->heartbeat_timeout(), absl::Milliseconds(1500));
  absl::StatusOr<std::string> id =
      registry->Register(v1::WORKER_ROLE_DECODE, "10.0.0.1:7200", Model(), DecodeLoad(100));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_TRUE(registry->PickDecode(16, 1).ok());

  Advance(absl::Milliseconds(1500));
  EXPECT_TRUE(registry->Snapshot()[0].healthy);
  Advance(absl::Milliseconds(1));
  EXPECT_FALSE(registry->Snapshot()[0].healthy);
  NoPlacement why;
  absl::StatusOr<Placement> p = registry->PickDecode(16, 1, &why);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(why, NoPlacement::kNoWorker);

  EXPECT_TRUE(registry->Heartbeat(*id, DecodeLoad(100)));
  EXPECT_TRUE(registry->Snapshot()[0].healthy);
  EXPECT_TRUE(registry->PickDecode(16, 1).ok());
}

TEST_F(WorkerRegistryTest, HeartbeatFromUnknownWorkerIsNotKnown) {
  auto registry = MakeRegistry();
  EXPECT_FALSE(registry->Heartbeat("worker-42", DecodeLoad(1)));
}

TEST_F(WorkerRegistryTest, RefusesOtherModelNamingBothFingerprints) {
  auto registry = MakeRegistry();
  absl::StatusOr<std::string> id = registry->Register(v1::WORKER_ROLE_PREFILL, "10.0.0.1:7100",
                                                      Model("ffffeeee"), PrefillLoad(0));
  ASSERT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(id.status().message(), HasSubstr("ffffeeee"));
  EXPECT_THAT(id.status().message(), HasSubstr(kFingerprint));
  EXPECT_TRUE(registry->Snapshot().empty());
}

TEST_F(WorkerRegistryTest, RefusesIncompleteRegistrations) {
  auto registry = MakeRegistry();
  EXPECT_EQ(registry->Register(v1::WORKER_ROLE_UNSPECIFIED, "a:1", Model(), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry->Register(v1::WORKER_ROLE_DECODE, "", Model(), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry->Register(v1::WORKER_ROLE_DECODE, "a:1", Model(kFingerprint, 0), {})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // A prefill worker needs no block size.
  EXPECT_TRUE(registry->Register(v1::WORKER_ROLE_PREFILL, "a:1", Model(kFingerprint, 0), {}).ok());
}

TEST_F(WorkerRegistryTest, LeastLoadedDecodePicksMostFreeBlocksAndSubtractsThem) {
  auto registry = MakeRegistry();
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_DECODE, "a:1", Model(), DecodeLoad(100)).ok());
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_DECODE, "b:1", Model(), DecodeLoad(120)).ok());
  // 300 tokens = 19 blocks of 16.
  absl::StatusOr<Placement> p = registry->PickDecode(300, 1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->address, "b:1");
  EXPECT_EQ(p->n_blocks, 19);
  // b now has 101 free in the router's view, still more than a.
  EXPECT_THAT(registry->PickDecode(300, 1), PlacedOn("b:1"));
  // b: 82 < a: 100.
  EXPECT_THAT(registry->PickDecode(300, 1), PlacedOn("a:1"));
  // The next heartbeat overwrites the optimistic view.
  const std::vector<WorkerSnapshot> workers = registry->Snapshot();
  EXPECT_EQ(workers[0].load.kv_blocks_free(), 81);
  EXPECT_EQ(workers[1].load.kv_blocks_free(), 82);
  EXPECT_TRUE(registry->Heartbeat(workers[1].id, DecodeLoad(500)));
  EXPECT_THAT(registry->PickDecode(300, 1), PlacedOn("b:1"));
}

TEST_F(WorkerRegistryTest, DecodeCapacityFilter) {
  auto registry = MakeRegistry();
  ASSERT_TRUE(
      registry->Register(v1::WORKER_ROLE_DECODE, "a:1", Model(), DecodeLoad(10, 20)).ok());
  NoPlacement why;
  // 11 blocks: fits the total, not what is free.
  absl::StatusOr<Placement> p = registry->PickDecode(11 * 16, 1, &why);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(why, NoPlacement::kNoCapacity);
  // 21 blocks: more than it has at all.
  p = registry->PickDecode(21 * 16, 1, &why);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(why, NoPlacement::kTooLarge);
  // 10 blocks exactly.
  p = registry->PickDecode(10 * 16, 1, &why);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->n_blocks, 10);
  // Now nothing is free.
  EXPECT_FALSE(registry->PickDecode(1, 1).ok());
}

TEST_F(WorkerRegistryTest, IdsFromARouterBeforeItsRestartAreUnknown) {
  auto before = MakeRegistry();
  absl::StatusOr<std::string> old_id =
      before->Register(v1::WORKER_ROLE_PREFILL, "p:1", Model(), PrefillLoad(0));
  ASSERT_TRUE(old_id.ok());
  // The restarted router: another worker registers first and must not share that id.
  auto after = MakeRegistry();
  absl::StatusOr<std::string> other =
      after->Register(v1::WORKER_ROLE_DECODE, "d:1", Model(), DecodeLoad(10));
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *old_id);
  EXPECT_FALSE(after->Heartbeat(*old_id, PrefillLoad(0)));
}

TEST_F(WorkerRegistryTest, DecodeCountsBlocksByEachWorkersReserveAhead) {
  auto registry = MakeRegistry();
  // Holds all of max_tokens at admission: a 32-token prompt with max_tokens 320 needs
  // ceil((32 + 319) / 16) = 22 blocks there, more than its 20 free.
  v1::ModelIdentity all_up_front = Model();
  all_up_front.set_kv_reserve_ahead_tokens(-1);
  ASSERT_TRUE(
      registry->Register(v1::WORKER_ROLE_DECODE, "all:1", all_up_front, DecodeLoad(20)).ok());
  // Holds 16 generated tokens ahead: ceil((32 + 16) / 16) = 3 blocks.
  v1::ModelIdentity sixteen_ahead = Model();
  sixteen_ahead.set_kv_reserve_ahead_tokens(16);
  ASSERT_TRUE(
      registry->Register(v1::WORKER_ROLE_DECODE, "ahead:1", sixteen_ahead, DecodeLoad(3)).ok());
  absl::StatusOr<Placement> p = registry->PickDecode(32, 320);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->address, "ahead:1");
  EXPECT_EQ(p->n_blocks, 3);
  // Now "ahead" is full and "all" cannot hold the request: nothing fits, but a short one does.
  NoPlacement why;
  EXPECT_FALSE(registry->PickDecode(32, 320, &why).ok());
  EXPECT_EQ(why, NoPlacement::kNoCapacity);
  p = registry->PickDecode(32, 10);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->address, "all:1");
  EXPECT_EQ(p->n_blocks, 3);  // ceil((32 + 9) / 16)
}

TEST_F(WorkerRegistryTest, DecodeCountsEachLayerGroupsBlocksAndOnlyAWindowsForWindowedOnes) {
  auto registry = MakeRegistry();
  // A global group and two groups of window 64 (engine/kv_layer_groups.h), all of max_tokens
  // held: a 200-token prompt with max_tokens 41 holds 240 tokens, 15 blocks of 16 in the global
  // group; the first generated token's query (position 200) sees tokens 137.., so each windowed
  // group holds blocks 8..14, 7 of them: 15 + 2 * 7 = 29.
  v1::ModelIdentity windowed = Model();
  windowed.set_kv_reserve_ahead_tokens(-1);
  for (int32_t window : {0, 64, 64}) windowed.add_kv_group_windows(window);
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_DECODE, "w:1", windowed, DecodeLoad(29)).ok());
  absl::StatusOr<Placement> p = registry->PickDecode(200, 41);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->n_blocks, 29);
  NoPlacement why;
  EXPECT_FALSE(registry->PickDecode(200, 41, &why).ok());  // its 29 free blocks are promised
}

TEST_F(WorkerRegistryTest, DecodeSkipsWorkersWithTooShortContext) {
  auto registry = MakeRegistry();
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_DECODE, "short:1", Model(kFingerprint, 16, 512),
                                 DecodeLoad(1000))
                  .ok());
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_DECODE, "long:1", Model(kFingerprint, 16, 4096),
                                 DecodeLoad(100))
                  .ok());
  EXPECT_THAT(registry->PickDecode(100, 1), PlacedOn("short:1"));
  EXPECT_THAT(registry->PickDecode(1000, 1), PlacedOn("long:1"));
}

TEST_F(WorkerRegistryTest, LeastLoadedPrefillPicksFewestQueuedTokensAndAddsThem) {
  auto registry = MakeRegistry();
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_PREFILL, "a:1", Model(), PrefillLoad(500)).ok());
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_PREFILL, "b:1", Model(), PrefillLoad(100)).ok());
  EXPECT_THAT(registry->PickPrefill(300), PlacedOn("b:1"));  // b: 400
  EXPECT_THAT(registry->PickPrefill(300), PlacedOn("b:1"));  // b: 700
  EXPECT_THAT(registry->PickPrefill(300), PlacedOn("a:1"));  // a: 800
  EXPECT_EQ(registry->Snapshot()[0].load.queued_prompt_tokens(), 800);
}

TEST_F(WorkerRegistryTest, PrefillWithoutWorkersIsUnavailable) {
  auto registry = MakeRegistry();
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_DECODE, "a:1", Model(), DecodeLoad(5)).ok());
  EXPECT_EQ(registry->PickPrefill(10).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(WorkerRegistryTest, RoundRobinRotatesOverEligibleWorkers) {
  auto registry = MakeRegistry(PlacementPolicy::kRoundRobin);
  for (const char* a : {"a:1", "b:1", "c:1"}) {
    ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_DECODE, a, Model(), DecodeLoad(100)).ok());
    ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_PREFILL, std::string("p") + a, Model(),
                                   PrefillLoad(0))
                    .ok());
  }
  std::vector<std::string> decode, prefill;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<Placement> d = registry->PickDecode(16, 1);
    ASSERT_TRUE(d.ok()) << d.status();
    decode.push_back(d->address);
    absl::StatusOr<Placement> p = registry->PickPrefill(16);
    ASSERT_TRUE(p.ok()) << p.status();
    prefill.push_back(p->address);
  }
  EXPECT_THAT(decode, ::testing::ElementsAre("a:1", "b:1", "c:1", "a:1"));
  EXPECT_THAT(prefill, ::testing::ElementsAre("pa:1", "pb:1", "pc:1", "pa:1"));
  // Round robin still respects capacity: b is full.
  const std::string b = registry->Snapshot()[2].id;
  ASSERT_EQ(registry->Snapshot()[2].address, "b:1");
  registry->MarkFull(b);
  EXPECT_THAT(registry->PickDecode(16, 1), PlacedOn("c:1"));
  EXPECT_THAT(registry->PickDecode(16, 1), PlacedOn("a:1"));
  EXPECT_THAT(registry->PickDecode(16, 1), PlacedOn("c:1"));
}

// KV-aware placement. Prompts of 64 tokens in blocks of 16: 3 blocks a worker may hold (the last
// token is always computed).
std::vector<engine::TokenId> Conversation(int salt) {
  std::vector<engine::TokenId> tokens(64);
  for (int i = 0; i < 64; ++i) tokens[i] = salt * 1000 + i;
  return tokens;
}

// A load advertising the cached blocks of `prompt` (all of it, or its first `n_blocks` blocks).
v1::WorkerLoad WithCached(v1::WorkerLoad load, const std::vector<engine::TokenId>& prompt,
                          int32_t n_blocks = 3) {
  PromptHashes hashes(kFingerprint, "", prompt);
  const std::vector<uint64_t>& all = hashes.ForBlockSize(16);
  for (int32_t b = 0; b < n_blocks && b < static_cast<int32_t>(all.size()); ++b) {
    load.add_cached_block_hashes(all[b]);
  }
  return load;
}

// A colocated decode worker prefills its own request when it would be chosen anyway or ties,
// keeping its KV local; a prefill worker beside it takes the prompt when it is the policy's pick
// (kv-aware: faster, or as fast without stalling sequences).
TEST_F(WorkerRegistryTest, AColocatedWorkerPrefillsItsOwnRequestUnlessTheQueueSendsItElsewhere) {
  const v1::WorkerLoad colocated_load = [] {
    v1::WorkerLoad l = DecodeLoad(100);
    l.set_prefill_tokens_per_second(100);
    return l;
  }();
  v1::WorkerLoad prefill_load = PrefillLoad(0);
  prefill_load.set_prefill_tokens_per_second(100);
  for (PlacementPolicy policy : {PlacementPolicy::kLeastLoaded, PlacementPolicy::kRoundRobin}) {
    SCOPED_TRACE(PlacementPolicyName(policy));
    auto registry = MakeRegistry(policy);
    ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_PREFILL, "p:1", Model(), prefill_load).ok());
    absl::StatusOr<std::string> both =
        registry->Register(v1::WORKER_ROLE_BOTH, "both:1", Model(), colocated_load);
    ASSERT_TRUE(both.ok());
    absl::StatusOr<Placement> decode = registry->PickDecode(16, 1);
    ASSERT_TRUE(decode.ok());
    EXPECT_EQ(decode->address, "both:1");
    // Equal queues: the decode worker's own (each pick adds 16 tokens to its queue).
    EXPECT_THAT(registry->PickPrefill(16, decode->worker_id), PlacedOn("both:1"));
    EXPECT_THAT(registry->PickPrefill(16, decode->worker_id),
                PlacedOn(policy == PlacementPolicy::kRoundRobin ? "both:1" : "p:1"));
    // A long queue on it: least loaded computes the prompt on the idle prefill worker; round
    // robin keeps it local.
    v1::WorkerLoad queued = colocated_load;
    queued.set_queued_prompt_tokens(1000);
    ASSERT_TRUE(registry->Heartbeat(*both, queued));
    EXPECT_THAT(registry->PickPrefill(16, decode->worker_id),
                PlacedOn(policy == PlacementPolicy::kRoundRobin ? "both:1" : "p:1"));
  }

  // KV-aware with a 2 s target, at 100 tokens/s.
  auto registry = std::make_unique<WorkerRegistry>(WorkerRegistryOptions{
      .model_fingerprint = kFingerprint,
      .placement = PlacementPolicy::kKvAware,
      .targets = {.ttft = absl::Seconds(2)},
      .clock = &clock_});
  absl::StatusOr<std::string> p =
      registry->Register(v1::WORKER_ROLE_PREFILL, "p:1", Model(), prefill_load);
  absl::StatusOr<std::string> both =
      registry->Register(v1::WORKER_ROLE_BOTH, "both:1", Model(), colocated_load);
  ASSERT_TRUE(both.ok() && p.ok());
  // Equally fast and costly: its own.
  EXPECT_THAT(registry->PickPrefill(16, *both), PlacedOn("both:1"));
  // Equally fast again, but its pass would stall the 2 sequences it decodes: the prefill worker.
  v1::WorkerLoad decoding = colocated_load;
  decoding.set_running_sequences(2);
  ASSERT_TRUE(registry->Heartbeat(*both, decoding));
  EXPECT_THAT(registry->PickPrefill(16, *both), PlacedOn("p:1"));
  // Equal queues now (16 tokens each, equally fast): the stall alone decides, and the prefill
  // worker's pass stalls nothing.
  EXPECT_THAT(registry->PickPrefill(16, *both), PlacedOn("p:1"));
  // The prefill worker's queue past the target (1.9 + 0.16 s): its own, stall and all.
  v1::WorkerLoad queued = prefill_load;
  queued.set_queued_prompt_tokens(190);
  ASSERT_TRUE(registry->Heartbeat(*p, queued));
  ASSERT_TRUE(registry->Heartbeat(*both, decoding));
  EXPECT_THAT(registry->PickPrefill(16, *both), PlacedOn("both:1"));

  // Placed for decode on the colocated worker, a prompt is not yet in its cache when its prefill
  // is placed: a queue of 150 tokens there (1.5 + 0.64 s, past the target) sends the 64-token
  // prompt to the idle prefill worker (0.64 s), and afterwards the colocated worker is expected
  // to hold its 3 blocks beside the 3 it advertised (the KV arrives there).
  const std::vector<engine::TokenId> request_tokens = Conversation(9);
  PromptHashes request(kFingerprint, "", request_tokens);
  v1::WorkerLoad advertising = WithCached(colocated_load, Conversation(3));
  advertising.set_queued_prompt_tokens(150);
  ASSERT_TRUE(registry->Heartbeat(*both, advertising));
  ASSERT_TRUE(registry->Heartbeat(*p, prefill_load));
  ASSERT_THAT(registry->PickDecode(64, 16, nullptr, {}, &request), PlacedOn("both:1"));
  EXPECT_THAT(registry->PickPrefill(64, *both, {}, &request), PlacedOn("p:1"));
  ASSERT_EQ(registry->Snapshot()[1].address, "both:1");
  EXPECT_EQ(registry->Snapshot()[1].n_cached_blocks, 6);
}

// Between two colocated workers, the pass of a request decoding on one stays there when the other
// merely runs fewer sequences (the stall would move, and the KV with it), and moves where the other
// holds the prompt cached (less to compute: the stall, counted as large there, is shorter).
TEST_F(WorkerRegistryTest, AColocatedWorkerKeepsItsPassUnlessAnotherComputesLess) {
  auto registry = std::make_unique<WorkerRegistry>(WorkerRegistryOptions{
      .model_fingerprint = kFingerprint,
      .placement = PlacementPolicy::kKvAware,
      .targets = {.ttft = absl::Seconds(2)},
      .clock = &clock_});
  const auto colocated_load = [](int32_t running) {
    v1::WorkerLoad l = DecodeLoad(100);
    l.set_prefill_tokens_per_second(100);
    l.set_running_sequences(running);
    return l;
  };
  absl::StatusOr<std::string> a =
      registry->Register(v1::WORKER_ROLE_BOTH, "a:1", Model(), colocated_load(3));
  absl::StatusOr<std::string> b =
      registry->Register(v1::WORKER_ROLE_BOTH, "b:1", Model(), colocated_load(1));
  ASSERT_TRUE(a.ok() && b.ok());
  // A request with no colocated decode worker named: the one stalling fewer sequences.
  EXPECT_THAT(registry->PickPrefill(64), PlacedOn("b:1"));
  // Placed for decode on the busier one, its pass stays there.
  EXPECT_THAT(registry->PickPrefill(64, *a), PlacedOn("a:1"));
  // The other holds the prompt: 16 tokens to compute there against 64 here.
  const std::vector<engine::TokenId> tokens = Conversation(4);
  PromptHashes request(kFingerprint, "", tokens);
  ASSERT_TRUE(registry->Heartbeat(*b, WithCached(colocated_load(1), tokens)));
  ASSERT_TRUE(registry->Heartbeat(*a, colocated_load(3)));
  EXPECT_THAT(registry->PickPrefill(64, *a, {}, &request), PlacedOn("b:1"));
}

// A report taken before the prompts just placed reached the worker cannot hide them: the queue
// reads at least what this router placed there and has not seen computed.
TEST_F(WorkerRegistryTest, AReportCannotHideThePromptsPlacedAndNotComputedYet) {
  auto registry = MakeRegistry();
  absl::StatusOr<std::string> a =
      registry->Register(v1::WORKER_ROLE_PREFILL, "pa:1", Model(), PrefillLoad(0));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_PREFILL, "pb:1", Model(), PrefillLoad(50)).ok());
  absl::StatusOr<Placement> first = registry->PickPrefill(100);
  ASSERT_THAT(first, PlacedOn("pa:1"));
  EXPECT_EQ(first->n_queued_tokens, 100);
  // pa reports an empty queue (taken before the prompt arrived): it still reads 100, so the next
  // prompt goes to pb.
  ASSERT_TRUE(registry->Heartbeat(*a, PrefillLoad(0)));
  EXPECT_EQ(registry->Snapshot()[0].load.queued_prompt_tokens(), 100);
  EXPECT_THAT(registry->PickPrefill(10), PlacedOn("pb:1"));
  // Computed: the reports count again.
  registry->PrefillEnded(*first);
  ASSERT_TRUE(registry->Heartbeat(*a, PrefillLoad(0)));
  EXPECT_EQ(registry->Snapshot()[0].load.queued_prompt_tokens(), 0);
  EXPECT_THAT(registry->PickPrefill(10), PlacedOn("pa:1"));
  // A report of more than this router placed (another router's prompts) reads as reported.
  ASSERT_TRUE(registry->Heartbeat(*a, PrefillLoad(500)));
  EXPECT_EQ(registry->Snapshot()[0].load.queued_prompt_tokens(), 500);
}

TEST_F(WorkerRegistryTest, WorkersToAvoidAreNeverPicked) {
  auto registry = MakeRegistry();
  absl::StatusOr<std::string> a =
      registry->Register(v1::WORKER_ROLE_DECODE, "a:1", Model(), DecodeLoad(100));
  absl::StatusOr<std::string> b =
      registry->Register(v1::WORKER_ROLE_DECODE, "b:1", Model(), DecodeLoad(10));
  absl::StatusOr<std::string> p =
      registry->Register(v1::WORKER_ROLE_PREFILL, "p:1", Model(), PrefillLoad(0));
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_PREFILL, "q:1", Model(), PrefillLoad(5000)).ok());
  ASSERT_TRUE(a.ok() && b.ok() && p.ok());
  // Least loaded would pick a:1 and p:1; a request they failed goes elsewhere.
  EXPECT_THAT(registry->PickDecode(16, 1, nullptr, {*a}), PlacedOn("b:1"));
  EXPECT_THAT(registry->PickPrefill(16, "", {*p}), PlacedOn("q:1"));
  // With every decode worker avoided there is none to wait for.
  NoPlacement why = NoPlacement::kNoCapacity;
  EXPECT_FALSE(registry->PickDecode(16, 1, &why, {*a, *b}).ok());
  EXPECT_EQ(why, NoPlacement::kNoWorker);
}

TEST_F(WorkerRegistryTest, StaticWorkerIsUnhealthyUntilItsStatusAnswers) {
  auto registry = MakeRegistry();
  const std::string id = registry->AddStatic(v1::WORKER_ROLE_DECODE, "s:1");
  EXPECT_EQ(registry->AddStatic(v1::WORKER_ROLE_DECODE, "s:1"), id);
  ASSERT_EQ(registry->StaticWorkers().size(), 1u);
  EXPECT_FALSE(registry->Snapshot()[0].healthy);
  EXPECT_FALSE(registry->PickDecode(16, 1).ok());

  EXPECT_TRUE(registry->ReportStatic(id, v1::WORKER_ROLE_DECODE, Model(), DecodeLoad(50)).ok());
  EXPECT_TRUE(registry->Snapshot()[0].healthy);
  EXPECT_TRUE(registry->PickDecode(16, 1).ok());

  // Answers count as heartbeats: none for the timeout, unhealthy.
  Advance(absl::Seconds(2));
  EXPECT_FALSE(registry->Snapshot()[0].healthy);
  // A static worker is never forgotten.
  Advance(absl::Hours(1));
  EXPECT_EQ(registry->Snapshot().size(), 1u);

  // A failed poll takes it out at once; the next answer brings it back.
  EXPECT_TRUE(registry->ReportStatic(id, v1::WORKER_ROLE_DECODE, Model(), DecodeLoad(50)).ok());
  registry->ReportStaticFailure(id, absl::UnavailableError("connection refused"));
  EXPECT_FALSE(registry->Snapshot()[0].healthy);
  EXPECT_EQ(registry->Snapshot()[0].last_error, "connection refused");
}

TEST_F(WorkerRegistryTest, ADrainingWorkerTakesNoRequestsAndIsForgottenOnceIdle) {
  auto registry = MakeRegistry();
  const std::string a = registry->AddStatic(v1::WORKER_ROLE_DECODE, "a:1");
  const std::string b = registry->AddStatic(v1::WORKER_ROLE_DECODE, "b:1");
  v1::WorkerLoad busy = DecodeLoad(900);
  busy.set_running_sequences(2);
  ASSERT_TRUE(registry->ReportStatic(a, v1::WORKER_ROLE_DECODE, Model(), busy).ok());
  ASSERT_TRUE(registry->ReportStatic(b, v1::WORKER_ROLE_DECODE, Model(), DecodeLoad(10)).ok());

  registry->Drain(a);  // a has the most free blocks, yet gets nothing new
  EXPECT_THAT(registry->PickDecode(16, 1), PlacedOn("b:1"));
  std::vector<WorkerSnapshot> workers = registry->Snapshot();
  ASSERT_EQ(workers.size(), 2u);  // still running two sequences: kept, healthy, draining
  EXPECT_TRUE(workers[0].draining);
  EXPECT_TRUE(workers[0].healthy);

  v1::WorkerLoad still_reserved = DecodeLoad(900);
  still_reserved.set_reservations(1);
  ASSERT_TRUE(registry->ReportStatic(a, v1::WORKER_ROLE_DECODE, Model(), still_reserved).ok());
  EXPECT_EQ(registry->Snapshot().size(), 2u);
  ASSERT_TRUE(registry->ReportStatic(a, v1::WORKER_ROLE_DECODE, Model(), DecodeLoad(1000)).ok());
  workers = registry->Snapshot();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].address, "b:1");
  EXPECT_EQ(registry->StaticWorkers().size(), 1u);  // no longer polled
}

TEST_F(WorkerRegistryTest, ADrainingWorkerThatStopsAnsweringIsForgotten) {
  auto registry = MakeRegistry();
  const std::string id = registry->AddStatic(v1::WORKER_ROLE_PREFILL, "p:1");
  ASSERT_TRUE(registry->ReportStatic(id, v1::WORKER_ROLE_PREFILL, Model(), PrefillLoad(512)).ok());
  registry->Drain(id);
  EXPECT_EQ(registry->Snapshot().size(), 1u);
  Advance(absl::Seconds(2));  // past the heartbeat timeout: unhealthy
  EXPECT_TRUE(registry->Snapshot().empty());
}

TEST_F(WorkerRegistryTest, ListingADrainingWorkerAgainEndsItsDraining) {
  auto registry = MakeRegistry();
  const std::string id = registry->AddStatic(v1::WORKER_ROLE_PREFILL, "p:1");
  ASSERT_TRUE(registry->ReportStatic(id, v1::WORKER_ROLE_PREFILL, Model(), PrefillLoad(512)).ok());
  registry->Drain(id);
  EXPECT_EQ(registry->PickPrefill(16).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(registry->AddStatic(v1::WORKER_ROLE_PREFILL, "p:1"), id);
  EXPECT_FALSE(registry->Snapshot()[0].draining);
  EXPECT_THAT(registry->PickPrefill(16), PlacedOn("p:1"));
}

TEST_F(WorkerRegistryTest, StaticWorkerWithOtherModelOrRoleStaysUnhealthy) {
  auto registry = MakeRegistry();
  const std::string id = registry->AddStatic(v1::WORKER_ROLE_DECODE, "s:1");
  absl::Status s = registry->ReportStatic(id, v1::WORKER_ROLE_DECODE, Model("beef"), DecodeLoad(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("beef"));
  EXPECT_FALSE(registry->Snapshot()[0].healthy);
  EXPECT_THAT(registry->Snapshot()[0].last_error, HasSubstr("beef"));

  s = registry->ReportStatic(id, v1::WORKER_ROLE_PREFILL, Model(), DecodeLoad(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(registry->Snapshot()[0].healthy);
  // A colocated worker serves every role.
  EXPECT_TRUE(registry->ReportStatic(id, v1::WORKER_ROLE_BOTH, Model(), DecodeLoad(5)).ok());
  EXPECT_TRUE(registry->Snapshot()[0].healthy);
}

TEST_F(WorkerRegistryTest, ReRegisteringAddressReplacesOldEntry) {
  auto registry = MakeRegistry();
  absl::StatusOr<std::string> first =
      registry->Register(v1::WORKER_ROLE_DECODE, "a:1", Model(), DecodeLoad(5));
  absl::StatusOr<std::string> second =
      registry->Register(v1::WORKER_ROLE_DECODE, "a:1", Model(), DecodeLoad(7));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE(*first, *second);
  ASSERT_EQ(registry->Snapshot().size(), 1u);
  EXPECT_EQ(registry->Snapshot()[0].load.kv_blocks_free(), 7);
  EXPECT_FALSE(registry->Heartbeat(*first, DecodeLoad(1)));
}

TEST_F(WorkerRegistryTest, MarkUnavailableLastsUntilNextHeartbeat) {
  auto registry = MakeRegistry();
  absl::StatusOr<std::string> id =
      registry->Register(v1::WORKER_ROLE_DECODE, "a:1", Model(), DecodeLoad(5));
  ASSERT_TRUE(id.ok()) << id.status();
  registry->MarkUnavailable(*id);
  EXPECT_FALSE(registry->PickDecode(16, 1).ok());
  registry->Heartbeat(*id, DecodeLoad(5));
  EXPECT_TRUE(registry->PickDecode(16, 1).ok());
}

TEST_F(WorkerRegistryTest, ForgetsRegisteredWorkersLongGone) {
  auto registry = MakeRegistry();
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_DECODE, "a:1", Model(), DecodeLoad(5)).ok());
  Advance(absl::Minutes(4));
  EXPECT_EQ(registry->Snapshot().size(), 1u);
  Advance(absl::Minutes(2));
  EXPECT_TRUE(registry->Snapshot().empty());
}

TEST_F(WorkerRegistryTest, WaitForChangeWakesOnHeartbeatAndOnStop) {
  auto registry = MakeRegistry();
  absl::StatusOr<std::string> id =
      registry->Register(v1::WORKER_ROLE_DECODE, "a:1", Model(), DecodeLoad(0));
  ASSERT_TRUE(id.ok()) << id.status();
  const uint64_t epoch = registry->epoch();
  std::thread beat([&] {
    absl::SleepFor(absl::Milliseconds(50));
    registry->Heartbeat(*id, DecodeLoad(10));
  });
  const absl::Time start = absl::Now();
  registry->WaitForChange(epoch, absl::Now() + absl::Seconds(30), nullptr);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_NE(registry->epoch(), epoch);
  beat.join();

  std::atomic<bool> stop{false};
  const uint64_t epoch2 = registry->epoch();
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(50));
    stop.store(true);
    registry->Wake();
  });
  registry->WaitForChange(epoch2, absl::Now() + absl::Seconds(30), &stop);
  EXPECT_TRUE(stop.load());
  stopper.join();

  // No change: returns at the deadline.
  registry->WaitForChange(registry->epoch(), absl::Now() + absl::Milliseconds(20), nullptr);
}

TEST_F(WorkerRegistryTest, KvAwarePicksTheWorkersHoldingThePrefixWhileLoadAllows) {
  auto registry = MakeRegistry(PlacementPolicy::kKvAware);
  const std::vector<engine::TokenId> prompt = Conversation(1);
  // Decode: the holder has 20 more blocks in use, the prefix saves 3 of 4 prompt blocks + 1.
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_DECODE, "d-cold:1", Model(), DecodeLoad(900)).ok());
  ASSERT_TRUE(registry
                  ->Register(v1::WORKER_ROLE_DECODE, "d-warm:1", Model(),
                             WithCached(DecodeLoad(898), prompt))
                  .ok());
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_PREFILL, "p-cold:1", Model(), PrefillLoad(0)).ok());
  ASSERT_TRUE(registry
                  ->Register(v1::WORKER_ROLE_PREFILL, "p-warm:1", Model(),
                             WithCached(PrefillLoad(40), prompt))
                  .ok());
  PromptHashes request(kFingerprint, "", prompt);
  // Decode: no sequences on either, no speeds measured (the same assumed): the same time per
  // token, and d-warm has to receive 2 of the request's 5 blocks against d-cold's 5.
  EXPECT_THAT(registry->PickDecode(64, 16, nullptr, {}, &request), PlacedOn("d-warm:1"));
  // Prefill, both at the same assumed rate: cold 64 tokens to compute; warm 40 queued + 64 - 48.
  // p-warm then queues 40 + 16.
  EXPECT_THAT(registry->PickPrefill(64, "", {}, &request), PlacedOn("p-warm:1"));
  // Without the prompt the same policy sees no hits: the least queued worker wins (0 < 56), and
  // queues all 64 tokens.
  EXPECT_THAT(registry->PickPrefill(64, "", {}), PlacedOn("p-cold:1"));

  // Another conversation hits nowhere: load decides (p-warm's 56 queued tokens < p-cold's 64).
  const std::vector<engine::TokenId> other_tokens = Conversation(2);
  PromptHashes other(kFingerprint, "", other_tokens);
  EXPECT_THAT(registry->PickPrefill(64, "", {}, &other), PlacedOn("p-warm:1"));
  // d-warm holds the first request now: with it, the next goes to d-cold.
  EXPECT_THAT(registry->PickDecode(64, 16, nullptr, {}, &request), PlacedOn("d-cold:1"));
}

TEST_F(WorkerRegistryTest, KvAwareLetsLoadOutweighAShortHit) {
  auto registry = MakeRegistry(PlacementPolicy::kKvAware);
  const std::vector<engine::TokenId> prompt = Conversation(3);
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_PREFILL, "p-idle:1", Model(), PrefillLoad(0)).ok());
  ASSERT_TRUE(registry
                  ->Register(v1::WORKER_ROLE_PREFILL, "p-busy:1", Model(),
                             WithCached(PrefillLoad(500), prompt, 1))
                  .ok());
  PromptHashes request(kFingerprint, "", prompt);
  EXPECT_THAT(registry->PickPrefill(64, "", {}, &request), PlacedOn("p-idle:1"));
}

// Predicted seconds: a prefill worker's measured rate counts, not only its tokens.
TEST_F(WorkerRegistryTest, KvAwareWeighsTokensAtEachWorkersMeasuredRate) {
  auto registry = MakeRegistry(PlacementPolicy::kKvAware);
  const std::vector<engine::TokenId> prompt = Conversation(8);
  // The holder of 48 of the 64 tokens is slow: 100 queued + 16 at 100 tokens/s = 1.16 s; the
  // cold worker computes 64 at 1000 tokens/s in 0.064 s.
  v1::WorkerLoad slow = WithCached(PrefillLoad(100), prompt);
  slow.set_prefill_tokens_per_second(100);
  v1::WorkerLoad fast = PrefillLoad(0);
  fast.set_prefill_tokens_per_second(1000);
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_PREFILL, "p-slow:1", Model(), slow).ok());
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_PREFILL, "p-fast:1", Model(), fast).ok());
  PromptHashes request(kFingerprint, "", prompt);
  EXPECT_THAT(registry->PickPrefill(64, "", {}, &request), PlacedOn("p-fast:1"));

  // Decode: the measured step fits, with the sequences each runs.
  v1::WorkerLoad busy = DecodeLoad(900);
  busy.set_running_sequences(8);
  busy.set_decode_step_seconds(0.01);
  busy.set_decode_row_cost(0.5);  // 0.01 * (1 + 0.5 * 8) = 0.05 s a token
  v1::WorkerLoad quick = DecodeLoad(900);
  quick.set_running_sequences(2);
  quick.set_decode_step_seconds(0.02);
  quick.set_decode_row_cost(0.5);  // 0.02 * (1 + 0.5 * 2) = 0.04 s a token
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_DECODE, "d-busy:1", Model(),
                                 WithCached(busy, prompt)).ok());
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_DECODE, "d-quick:1", Model(), quick).ok());
  EXPECT_THAT(registry->PickDecode(64, 16, nullptr, {}, &request), PlacedOn("d-quick:1"));
}

// With targets: a hit is taken while it keeps the target; where nothing does, the least busy.
TEST_F(WorkerRegistryTest, KvAwareAimsForTheTargets) {
  auto registry = std::make_unique<WorkerRegistry>(WorkerRegistryOptions{
      .model_fingerprint = kFingerprint,
      .placement = PlacementPolicy::kKvAware,
      .targets = {.ttft = absl::Milliseconds(500), .tpot = absl::Milliseconds(50)},
      .clock = &clock_});
  const std::vector<engine::TokenId> prompt = Conversation(9);
  // At 100 tokens/s: the holder predicts 30 queued + 16 = 0.46 s, the idle worker 0.64 s.
  v1::WorkerLoad holder = WithCached(PrefillLoad(30), prompt);
  holder.set_prefill_tokens_per_second(100);
  v1::WorkerLoad idle = PrefillLoad(0);
  idle.set_prefill_tokens_per_second(100);
  absl::StatusOr<std::string> holder_id =
      registry->Register(v1::WORKER_ROLE_PREFILL, "p-holder:1", Model(), holder);
  ASSERT_TRUE(holder_id.ok());
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_PREFILL, "p-idle:1", Model(), idle).ok());
  PromptHashes request(kFingerprint, "", prompt);
  EXPECT_THAT(registry->PickPrefill(64, "", {}, &request), PlacedOn("p-holder:1"));
  // The holder's queue grows past the target (90 + 16 = 1.06 s): neither keeps it, and the
  // request goes where nothing waits, computing the prefix a second time.
  holder.set_queued_prompt_tokens(90);
  ASSERT_TRUE(registry->Heartbeat(*holder_id, holder));
  EXPECT_THAT(registry->PickPrefill(64, "", {}, &request), PlacedOn("p-idle:1"));

  // Decode: the holder of the prefix keeps the 50 ms target with 4 sequences (0.01 * (1 + 0.25 *
  // 4) = 0.02 s a token), so it takes the request though the empty worker would be faster.
  v1::WorkerLoad warm = WithCached(DecodeLoad(900), prompt);
  warm.set_running_sequences(4);
  warm.set_decode_step_seconds(0.01);
  warm.set_decode_row_cost(0.25);
  v1::WorkerLoad empty = DecodeLoad(900);
  empty.set_decode_step_seconds(0.01);
  empty.set_decode_row_cost(0.25);
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_DECODE, "d-warm:1", Model(), warm).ok());
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_DECODE, "d-empty:1", Model(), empty).ok());
  EXPECT_THAT(registry->PickDecode(64, 16, nullptr, {}, &request), PlacedOn("d-warm:1"));
}

TEST_F(WorkerRegistryTest, AWorkersReportReplacesItsCacheAndARestartEmptiesIt) {
  auto registry = MakeRegistry(PlacementPolicy::kKvAware);
  const std::vector<engine::TokenId> prompt = Conversation(4);
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_DECODE, "d-a:1", Model(), DecodeLoad(500)).ok());
  absl::StatusOr<std::string> b = registry->Register(v1::WORKER_ROLE_DECODE, "d-b:1", Model(),
                                                     WithCached(DecodeLoad(499), prompt));
  ASSERT_TRUE(b.ok());
  PromptHashes request(kFingerprint, "", prompt);
  EXPECT_THAT(registry->PickDecode(64, 16, nullptr, {}, &request), PlacedOn("d-b:1"));
  auto cached_of = [&](const std::string& address) {
    for (const WorkerSnapshot& w : registry->Snapshot()) {
      if (w.address == address) return w.n_cached_blocks;
    }
    return -1;
  };
  EXPECT_EQ(cached_of("d-b:1"), 3);
  // The worker restarts: it registers again at its address with an empty cache.
  ASSERT_TRUE(registry->Register(v1::WORKER_ROLE_DECODE, "d-b:1", Model(), DecodeLoad(499)).ok());
  EXPECT_EQ(cached_of("d-b:1"), 0);
  EXPECT_THAT(registry->PickDecode(64, 16, nullptr, {}, &request), PlacedOn("d-a:1"));
  // A heartbeat replaces the advertised set as a whole, too.
  absl::StatusOr<std::string> c = registry->Register(v1::WORKER_ROLE_DECODE, "d-c:1", Model(),
                                                     WithCached(DecodeLoad(400), prompt));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(cached_of("d-c:1"), 3);
  ASSERT_TRUE(registry->Heartbeat(*c, DecodeLoad(400)));
  EXPECT_EQ(cached_of("d-c:1"), 0);
  // Snapshots carry the count, not the hashes.
  for (const WorkerSnapshot& w : registry->Snapshot()) {
    EXPECT_EQ(w.load.cached_block_hashes_size(), 0);
  }
}

TEST_F(WorkerRegistryTest, APickExpectsTheChosenCachingWorkerToHoldThePrompt) {
  auto registry = MakeRegistry(PlacementPolicy::kKvAware);
  const std::vector<engine::TokenId> warm = Conversation(5);
  const std::vector<engine::TokenId> fresh = Conversation(6);
  ASSERT_TRUE(registry
                  ->Register(v1::WORKER_ROLE_PREFILL, "p-a:1", Model(),
                             WithCached(PrefillLoad(0), warm))
                  .ok());
  ASSERT_TRUE(registry
                  ->Register(v1::WORKER_ROLE_PREFILL, "p-b:1", Model(),
                             WithCached(PrefillLoad(40), Conversation(7)))
                  .ok());
  PromptHashes first(kFingerprint, "", fresh);
  EXPECT_THAT(registry->PickPrefill(64, "", {}, &first), PlacedOn("p-a:1"));  // load: 0 < 40
  // Before any report, the next turn of that conversation follows it there: p-a costs
  // 64 - 48 + 64 queued = 80 against p-b's 64 + 40 = 104 (128 were its blocks not expected).
  PromptHashes next(kFingerprint, "", fresh);
  EXPECT_THAT(registry->PickPrefill(64, "", {}, &next), PlacedOn("p-a:1"));
  // That pick queued only the 16 tokens p-a had not cached: 64 + 16.
  for (const WorkerSnapshot& w : registry->Snapshot()) {
    if (w.address == "p-a:1") {
      EXPECT_EQ(w.load.queued_prompt_tokens(), 80);
    }
  }
}

TEST(PrefixAffinityTest, CountsLeadingCachedBlocks) {
  const std::vector<engine::TokenId> prompt = Conversation(8);
  PromptHashes hashes(kFingerprint, "", prompt);
  const std::vector<uint64_t>& blocks = hashes.ForBlockSize(16);
  ASSERT_EQ(blocks.size(), 3u);  // 63 tokens usable: 3 full blocks
  EXPECT_EQ(hashes.ForBlockSize(32).size(), 1u);
  absl::flat_hash_set<uint64_t> cached = {blocks[0], blocks[2]};
  EXPECT_EQ(CachedPrefixBlocks(blocks, cached), 1);  // a hole ends the prefix
  cached.insert(blocks[1]);
  EXPECT_EQ(CachedPrefixBlocks(blocks, cached), 3);
  PromptHashes other_model("another-fingerprint", "", prompt);
  EXPECT_EQ(CachedPrefixBlocks(other_model.ForBlockSize(16), cached), 0);
  PromptHashes salted(kFingerprint, "tenant-a", prompt);
  EXPECT_EQ(CachedPrefixBlocks(salted.ForBlockSize(16), cached), 0);
}

TEST(PlacementPolicyTest, ParsesNames) {
  EXPECT_THAT(ParsePlacementPolicy("least-loaded"), IsOkAndHolds(PlacementPolicy::kLeastLoaded));
  EXPECT_THAT(ParsePlacementPolicy("round-robin"), IsOkAndHolds(PlacementPolicy::kRoundRobin));
  EXPECT_THAT(ParsePlacementPolicy("kv-aware"), IsOkAndHolds(PlacementPolicy::kKvAware));
  EXPECT_EQ(PlacementPolicyName(PlacementPolicy::kKvAware), "kv-aware");
  EXPECT_EQ(ParsePlacementPolicy("random").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlacementPolicyName(PlacementPolicy::kRoundRobin), "round-robin");
}

}  // namespace
}  // namespace baton::router
