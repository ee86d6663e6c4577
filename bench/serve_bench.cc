#include "bench/serve_bench.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <ctime>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/serve_workload.h"
#include "rpc/worker_status.h"

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct LoadResult {
  std::vector<RequestOutcome> outcomes;
  double duration_s = 0;
  std::optional<PhasedLoad> phased;  // the load's phases, when it had them
};

// Prints "bench serve: LABEL: k/n done" about every tenth of the way.
class Progress {
 public:
  Progress(std::ostream& log, std::string label, int32_t total)
      : log_(log), label_(std::move(label)), total_(total), step_(std::max(1, total / 10)) {}
  void Done(const RequestOutcome& outcome) {
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    failed_ += !outcome.ok;
    if (done_ % step_ == 0 || done_ == total_) {
      log_ << "bench serve: " << label_ << ": " << done_ << "/" << total_ << " done";
      if (failed_ > 0) log_ << " (" << failed_ << " failed)";
      log_ << std::endl;
    }
  }

 private:
  std::mutex mu_;
  std::ostream& log_;
  const std::string label_;
  const int32_t total_;
  const int32_t step_;
  int32_t done_ = 0;
  int32_t failed_ = 0;
};

// Closed loop: `concurrency` threads, each sending the next request as soon as its last one ends.
LoadResult RunClosedLoop(ServeClient& client, const std::vector<ServeRequest>& requests,
                         int32_t concurrency, Progress& progress) {
  LoadResult result;
  result.outcomes.resize(requests.size());
  std::atomic<size_t> next{0};
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  const int32_t n_threads = std::clamp<int32_t>(concurrency, 1, static_cast<int32_t>(requests.size()));
  for (int32_t t = 0; t < n_threads; ++t) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < requests.size(); i = next++) {
        RequestOutcome outcome = client.Send(requests[i]);
        outcome.target_prompt_tokens = requests[i].target_prompt_tokens;
        progress.Done(outcome);
        result.outcomes[i] = std::move(outcome);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  result.duration_s = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

// Open loop: request i is sent at start + arrivals[i] on a thread of its own (later only while
// max_in_flight requests are already in flight).
LoadResult RunOpenLoop(ServeClient& client, const std::vector<ServeRequest>& requests,
                       const std::vector<double>& arrivals, int32_t max_in_flight,
                       Progress& progress) {
  LoadResult result;
  result.outcomes.resize(requests.size());
  std::mutex mu;
  std::condition_variable cv;
  int32_t in_flight = 0;
  std::vector<std::thread> threads;
  threads.reserve(requests.size());
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < requests.size(); ++i) {
    std::this_thread::sleep_until(
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i])));
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return in_flight < max_in_flight; });
      ++in_flight;
    }
    threads.emplace_back([&, i] {
      RequestOutcome outcome = client.Send(requests[i]);
      outcome.target_prompt_tokens = requests[i].target_prompt_tokens;
      progress.Done(outcome);
      result.outcomes[i] = std::move(outcome);
      std::lock_guard<std::mutex> lock(mu);
      --in_flight;
      cv.notify_all();
    });
  }
  for (std::thread& t : threads) t.join();
  result.duration_s = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

// Closed loop over conversations: `concurrency` threads, each running the next conversation's
// turns in order (a failed turn ends its conversation). Outcomes in conversation order.
LoadResult RunConversations(ServeClient& client, const std::vector<Conversation>& conversations,
                            int32_t concurrency, Progress& progress) {
  std::vector<std::vector<RequestOutcome>> per(conversations.size());
  std::atomic<size_t> next{0};
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  const int32_t n_threads =
      std::clamp<int32_t>(concurrency, 1, std::max<int32_t>(1, conversations.size()));
  for (int32_t t = 0; t < n_threads; ++t) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < conversations.size(); i = next++) {
        const Conversation& c = conversations[i];
        std::string history = c.system;
        for (const std::string& user : c.user_turns) {
          const std::string prompt = ConversationPrompt(history, user);
          RequestOutcome outcome = client.Send({.prompt = prompt, .max_tokens = c.max_tokens});
          progress.Done(outcome);
          const bool ok = outcome.ok;
          history = ConversationHistory(prompt, outcome.text);
          per[i].push_back(std::move(outcome));
          if (!ok) break;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  LoadResult result;
  result.duration_s = std::chrono::duration<double>(Clock::now() - start).count();
  for (std::vector<RequestOutcome>& turns : per) {
    for (RequestOutcome& o : turns) result.outcomes.push_back(std::move(o));
  }
  return result;
}

// The router's view of the workers now; empty (with a line in the log) when it cannot be had.
baton::v1::ClusterStatusResponse ClusterStatusOrEmpty(ServeClient& client, std::ostream& log) {
  absl::StatusOr<baton::v1::ClusterStatusResponse> status = client.ClusterStatus();
  if (status.ok()) return *std::move(status);
  log << "bench serve: no per-worker prefix-cache figures: " << status.status().message() << "\n";
  return {};
}

// What prefix caching saved over the outcomes (gRPC timings).
nlohmann::json PrefixCacheJson(const std::vector<RequestOutcome>& outcomes) {
  int64_t prompt = 0, prefill_cached = 0, decode_cached = 0, kv_bytes = 0;
  for (const RequestOutcome& r : outcomes) {
    if (!r.ok) continue;
    prompt += r.prompt_tokens;
    prefill_cached += r.prefill_cached_tokens;
    decode_cached += r.decode_cached_tokens;
    kv_bytes += r.kv_bytes;
  }
  auto fraction = [&](int64_t part) { return prompt ? static_cast<double>(part) / prompt : 0.0; };
  return {{"prompt_tokens", prompt},
          {"prefill_computed_tokens", prompt - prefill_cached},
          {"prefill_cached_tokens", prefill_cached},
          {"prefill_hit_rate", fraction(prefill_cached)},
          {"decode_cached_tokens", decode_cached},
          {"decode_hit_rate", fraction(decode_cached)},
          {"kv_bytes_handed_off", kv_bytes}};
}

// Two probes (the word list once and twice, one output token each) give the prompt calibration.
PromptCalibration Calibrate(ServeClient& client, std::ostream& log) {
  int32_t lengths[2] = {0, 0};
  for (int32_t times = 1; times <= 2; ++times) {
    const RequestOutcome probe =
        client.Send({.prompt = CalibrationPrompt(times), .max_tokens = 1});
    if (!probe.ok || probe.prompt_tokens <= 0) {
      log << "bench serve: WARNING: prompt calibration failed ("
          << (probe.ok ? "no usage.prompt_tokens" : probe.error + ": " + probe.error_message)
          << "); assuming one token per word" << std::endl;
      return {};
    }
    lengths[times - 1] = probe.prompt_tokens;
  }
  absl::StatusOr<PromptCalibration> c = CalibrationFromProbes(lengths[0], lengths[1]);
  if (!c.ok()) {
    log << "bench serve: WARNING: " << c.status().message() << "; assuming one token per word"
        << std::endl;
    return {};
  }
  log << absl::StrFormat("bench serve: prompt calibration: %.3f tokens per word, %d fixed\n",
                         c->tokens_per_word, c->overhead_tokens);
  return *c;
}

double Ms(double seconds) { return seconds * 1e3; }

nlohmann::json Rounded(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

std::string NowIso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

nlohmann::json SummaryJson(const LatencySummary& s) {
  return {{"count", s.count}, {"mean", Ms(s.mean)},     {"median", Ms(s.median)},
          {"p90", Ms(s.p90)}, {"p99", Ms(s.p99)},       {"max", Ms(s.max)}};
}

}  // namespace

nlohmann::json MetricsJson(const ServeMetrics& m, const Slo& slo) {
  nlohmann::json j = {
      {"duration", m.duration_s},
      {"completed", m.completed},
      {"failed", m.failed},
      {"errors", m.errors},
      {"total_input_tokens", m.total_input_tokens},
      {"total_output_tokens", m.total_output_tokens},
      {"request_throughput", Rounded(m.request_throughput)},
      {"output_throughput", Rounded(m.output_throughput)},
      {"total_token_throughput", Rounded(m.total_token_throughput)},
      {"slo_ttft_ms", slo.ttft_s ? nlohmann::json(Ms(*slo.ttft_s)) : nlohmann::json()},
      {"slo_tpot_ms", slo.tpot_s ? nlohmann::json(Ms(*slo.tpot_s)) : nlohmann::json()},
      {"good_requests", m.good_requests ? nlohmann::json(*m.good_requests) : nlohmann::json()},
      {"request_goodput",
       m.request_goodput ? Rounded(*m.request_goodput) : nlohmann::json()},
  };
  for (const auto& [name, s] : {std::pair{"ttft", &m.ttft_s}, std::pair{"tpot", &m.tpot_s},
                                std::pair{"itl", &m.itl_s}, std::pair{"e2el", &m.e2e_s}}) {
    j[absl::StrCat("mean_", name, "_ms")] = Ms(s->mean);
    j[absl::StrCat("median_", name, "_ms")] = Ms(s->median);
    j[absl::StrCat("std_", name, "_ms")] = Ms(s->stdev);
    j[absl::StrCat("p90_", name, "_ms")] = Ms(s->p90);
    j[absl::StrCat("p99_", name, "_ms")] = Ms(s->p99);
    j[absl::StrCat("max_", name, "_ms")] = Ms(s->max);
  }
  return j;
}

namespace {

// Warmup requests, `concurrency` (or one) at a time, unmeasured.
void RunWarmup(const ServeBenchOptions& options, ServeClient& client,
               const std::vector<ServeRequest>& warmup, std::ostream& log) {
  if (warmup.empty()) return;
  const int32_t c = std::clamp<int32_t>(options.concurrency > 0 ? options.concurrency : 1, 1,
                                        static_cast<int32_t>(warmup.size()));
  log << "bench serve: warmup: " << warmup.size() << " requests, " << c << " at a time"
      << std::endl;
  Progress progress(log, "warmup", static_cast<int32_t>(warmup.size()));
  (void)RunClosedLoop(client, warmup, c, progress);
}

uint64_t ArrivalSeed(uint64_t seed) { return seed ^ 0x9e3779b97f4a7c15ULL; }

// Phases: synthetic requests of each phase's lengths at its rate, after warmup requests of the
// first phase's lengths.
LoadResult RunPhases(const ServeBenchOptions& options, ServeClient& client, std::mt19937_64& rng,
                     PromptCalibration& calibration, std::ostream& log,
                     const std::function<void()>& measuring) {
  calibration = Calibrate(client, log);
  const LoadPhase& first = options.phases.front();
  RunWarmup(options, client,
            SyntheticRequests(options.warmup, first.input_len, first.output_len,
                              options.range_ratio, calibration, rng),
            log);
  measuring();
  PhasedLoad phased = BuildPhasedLoad(options.phases, options.range_ratio, calibration, rng,
                                      ArrivalSeed(options.seed));
  log << "bench serve: " << phased.requests.size() << " requests in " << options.phases.size()
      << " phases (seed " << options.seed << ")" << std::endl;
  Progress progress(log, "measured", static_cast<int32_t>(phased.requests.size()));
  LoadResult result = RunOpenLoop(client, phased.requests, phased.arrivals,
                                  std::max(1, options.max_in_flight), progress);
  result.phased = std::move(phased);
  return result;
}

// Each phase's metrics over its span of arrivals.
nlohmann::json PhasesJson(const ServeBenchOptions& options, const LoadResult& load) {
  nlohmann::json phases = nlohmann::json::array();
  const PhasedLoad& phased = *load.phased;
  for (size_t k = 0; k < options.phases.size(); ++k) {
    std::vector<RequestOutcome> outcomes;
    for (size_t i = 0; i < load.outcomes.size(); ++i) {
      if (phased.phase_of[i] == static_cast<int32_t>(k)) outcomes.push_back(load.outcomes[i]);
    }
    const double span = phased.phase_end[k] - phased.phase_start[k];
    const LoadPhase& phase = options.phases[k];
    nlohmann::json j = {{"input_len", phase.input_len},
                        {"output_len", phase.output_len},
                        {"num_prompts", phase.num_prompts},
                        {"request_rate", phase.request_rate},
                        {"start_s", phased.phase_start[k]},
                        {"end_s", phased.phase_end[k]}};
    j.update(MetricsJson(ComputeServeMetrics(outcomes, span, options.slo), options.slo));
    j["duration"] = span;  // the span goodput is counted over, not the requests' own time
    phases.push_back(std::move(j));
  }
  return phases;
}

// Single requests: a dataset or synthetic prompts, warmup first, then the measured load.
// `measuring` runs between the warmup and the measured load. Errors: an unreadable dataset.
absl::StatusOr<LoadResult> RunRequests(const ServeBenchOptions& options, ServeClient& client,
                                       std::mt19937_64& rng, PromptCalibration& calibration,
                                       std::ostream& log, const std::function<void()>& measuring) {
  // The requests: warmup ones first, then the measured ones, from one seeded stream.
  const int32_t n_total = options.warmup + options.num_prompts;
  std::vector<ServeRequest> requests;
  if (!options.dataset_path.empty()) {
    absl::StatusOr<std::vector<ServeRequest>> dataset =
        LoadJsonlDataset(options.dataset_path, options.output_len);
    if (!dataset.ok()) return dataset.status();
    requests = SampleDataset(*dataset, n_total, rng);
    log << "bench serve: " << dataset->size() << " prompts in " << options.dataset_path << "\n";
  } else {
    calibration = Calibrate(client, log);
    requests = SyntheticRequests(n_total, options.input_len, options.output_len,
                                 options.range_ratio, calibration, rng);
  }
  const std::vector<ServeRequest> warmup(requests.begin(), requests.begin() + options.warmup);
  requests.erase(requests.begin(), requests.begin() + options.warmup);
  RunWarmup(options, client, warmup, log);
  measuring();

  Progress progress(log, "measured", options.num_prompts);
  if (options.concurrency > 0) {
    log << "bench serve: " << options.num_prompts << " requests, " << options.concurrency
        << " in flight" << std::endl;
    return RunClosedLoop(client, requests, options.concurrency, progress);
  }
  const std::vector<double> arrivals =
      PoissonArrivals(options.num_prompts, options.request_rate, ArrivalSeed(options.seed));
  log << "bench serve: " << options.num_prompts << " requests, Poisson arrivals at "
      << options.request_rate << " requests/s (seed " << options.seed << ")" << std::endl;
  return RunOpenLoop(client, requests, arrivals, std::max(1, options.max_in_flight), progress);
}

// Conversations: `warmup` of them first (sharing the system prompt), then the measured ones.
LoadResult RunMultiTurn(const ServeBenchOptions& options, ServeClient& client,
                        std::mt19937_64& rng, PromptCalibration& calibration, std::ostream& log,
                        const std::function<void()>& measuring) {
  calibration = Calibrate(client, log);
  std::vector<Conversation> conversations = SyntheticConversations(
      options.warmup + options.conversations, options.turns, options.system_prompt_len,
      options.turn_len, options.output_len, calibration, rng);
  const std::vector<Conversation> warmup(conversations.begin(),
                                         conversations.begin() + options.warmup);
  conversations.erase(conversations.begin(), conversations.begin() + options.warmup);
  if (!warmup.empty()) {
    Progress progress(log, "warmup", options.warmup * options.turns);
    (void)RunConversations(client, warmup, options.concurrency, progress);
  }
  measuring();
  log << "bench serve: " << options.conversations << " conversations of " << options.turns
      << " turns (system prompt " << options.system_prompt_len << " tokens, " << options.turn_len
      << " user tokens per turn), " << options.concurrency << " in flight" << std::endl;
  Progress progress(log, "measured", options.conversations * options.turns);
  return RunConversations(client, conversations, options.concurrency, progress);
}

}  // namespace

nlohmann::json WorkerPrefixCacheJson(const baton::v1::ClusterStatusResponse& before,
                                     const baton::v1::ClusterStatusResponse& after) {
  auto key = [](const baton::v1::WorkerStatus& w) {
    return absl::StrCat(w.address(), "/", static_cast<int>(w.role()));
  };
  absl::flat_hash_map<std::string, baton::v1::PrefixCacheStats> start;
  for (const baton::v1::WorkerStatus& w : before.workers()) start[key(w)] = w.load().prefix_cache();
  auto rate = [](int64_t part, int64_t whole) {
    return whole > 0 ? static_cast<double>(part) / whole : 0.0;
  };
  nlohmann::json workers = nlohmann::json::array();
  for (const baton::v1::WorkerStatus& w : after.workers()) {
    const baton::v1::PrefixCacheStats& now = w.load().prefix_cache();
    const baton::v1::PrefixCacheStats& then = start[key(w)];  // zero when it was not there
    const int64_t queried = now.queried_tokens() - then.queried_tokens();
    const int64_t hits = now.hit_tokens() - then.hit_tokens();
    const int64_t queried_blocks = now.queried_blocks() - then.queried_blocks();
    const int64_t hit_blocks = now.hit_blocks() - then.hit_blocks();
    workers.push_back({{"address", w.address()},
                       {"role", std::string(rpc::WorkerRoleName(w.role()))},
                       {"queried_tokens", queried},
                       {"hit_tokens", hits},
                       {"token_hit_rate", rate(hits, queried)},
                       {"queried_blocks", queried_blocks},
                       {"hit_blocks", hit_blocks},
                       {"block_hit_rate", rate(hit_blocks, queried_blocks)},
                       {"evicted_blocks", now.evicted_blocks() - then.evicted_blocks()},
                       {"cached_blocks", now.cached_blocks()}});
  }
  return workers;
}

absl::StatusOr<ServeBenchResult> RunServeBench(const ServeBenchOptions& options,
                                               std::ostream& log) {
  if (options.num_prompts < 1) return absl::InvalidArgumentError("--num-prompts must be >= 1");
  if (!options.phases.empty()) {
    if (options.concurrency > 0 || options.conversations > 0 || !options.dataset_path.empty()) {
      return absl::InvalidArgumentError(
          "--phases is an open-loop synthetic load: not with --concurrency, --conversations or "
          "--dataset");
    }
  } else if ((options.request_rate > 0) == (options.concurrency > 0)) {
    return absl::InvalidArgumentError("give exactly one of --request-rate and --concurrency");
  }
  if (options.conversations > 0 && options.concurrency <= 0) {
    return absl::InvalidArgumentError(
        "a multi-turn run (--conversations) needs --concurrency: conversations in flight");
  }
  if (options.conversations > 0 && options.turns < 1) {
    return absl::InvalidArgumentError("--turns must be >= 1");
  }
  absl::StatusOr<std::unique_ptr<ServeClient>> client = CreateServeClient(options.client);
  if (!client.ok()) return client.status();
  std::mt19937_64 rng(options.seed);
  PromptCalibration calibration;
  LoadResult load;
  baton::v1::ClusterStatusResponse workers_before;
  auto measuring = [&] {
    if (options.client.protocol == ServeProtocol::kGrpc) {
      workers_before = ClusterStatusOrEmpty(**client, log);
    }
  };
  if (options.conversations > 0) {
    load = RunMultiTurn(options, **client, rng, calibration, log, measuring);
  } else if (!options.phases.empty()) {
    load = RunPhases(options, **client, rng, calibration, log, measuring);
  } else {
    absl::StatusOr<LoadResult> requests =
        RunRequests(options, **client, rng, calibration, log, measuring);
    if (!requests.ok()) return requests.status();
    load = *std::move(requests);
  }

  const ServeMetrics metrics = ComputeServeMetrics(load.outcomes, load.duration_s, options.slo);
  nlohmann::json j = {
      {"backend", "baton"},
      {"protocol", ServeProtocolName(options.client.protocol)},
      {"server", options.client.server},
      {"date", NowIso8601()},
      {"seed", options.seed},
      {"num_prompts", options.num_prompts},
      {"warmup", options.warmup},
      {"request_rate", options.request_rate > 0
                           ? (std::isfinite(options.request_rate) ? nlohmann::json(options.request_rate)
                                                                  : nlohmann::json("inf"))
                           : nlohmann::json()},
      {"concurrency", options.concurrency > 0 ? nlohmann::json(options.concurrency) : nlohmann::json()},
      {"dataset", options.dataset_path.empty() ? nlohmann::json() : nlohmann::json(options.dataset_path)},
      {"input_len", options.dataset_path.empty() ? nlohmann::json(options.input_len) : nlohmann::json()},
      {"output_len", options.output_len},
      {"range_ratio", options.range_ratio},
  };
  if (options.conversations > 0) {
    j["multi_turn"] = {{"conversations", options.conversations},
                       {"turns", options.turns},
                       {"system_prompt_len", options.system_prompt_len},
                       {"turn_len", options.turn_len}};
    j["num_prompts"] = load.outcomes.size();
  }
  j.update(MetricsJson(metrics, options.slo));
  if (load.phased) {
    j["phases"] = PhasesJson(options, load);
    j["num_prompts"] = load.outcomes.size();
    j["request_rate"] = nullptr;  // each phase's own
  }

  // Errors: one example message per code.
  nlohmann::json examples = nlohmann::json::object();
  for (const RequestOutcome& r : load.outcomes) {
    if (!r.ok && !examples.contains(r.error)) examples[r.error] = r.error_message;
  }
  j["error_examples"] = examples;

  // Did the synthetic prompts have the length asked for?
  if (options.dataset_path.empty() && options.conversations == 0) {
    int64_t n = 0, exact = 0, target_sum = 0, actual_sum = 0, worst = 0;
    for (const RequestOutcome& r : load.outcomes) {
      if (!r.ok || r.target_prompt_tokens <= 0 || r.prompt_tokens <= 0) continue;
      ++n;
      exact += r.prompt_tokens == r.target_prompt_tokens;
      target_sum += r.target_prompt_tokens;
      actual_sum += r.prompt_tokens;
      worst = std::max<int64_t>(worst, std::abs(r.prompt_tokens - r.target_prompt_tokens));
    }
    j["prompt_calibration"] = {{"measured", calibration.measured},
                               {"tokens_per_word", calibration.tokens_per_word},
                               {"overhead_tokens", calibration.overhead_tokens}};
    j["prompt_tokens_check"] = {
        {"checked", n},
        {"target_mean", n ? static_cast<double>(target_sum) / n : 0.0},
        {"actual_mean", n ? static_cast<double>(actual_sum) / n : 0.0},
        {"exact_fraction", n ? static_cast<double>(exact) / n : 0.0},
        {"max_abs_error", worst}};
  }

  // What the router said about each request (gRPC only): where the time went.
  if (options.client.protocol == ServeProtocol::kGrpc) {
    std::vector<double> queue, server_ttft, transfer, tail;
    int64_t kv_bytes = 0, n = 0, draft_tokens = 0, accepted_tokens = 0, decoded_tokens = 0;
    double mask_s = 0;
    for (const RequestOutcome& r : load.outcomes) {
      if (!r.ok) continue;
      ++n;
      queue.push_back(r.server_queue_s);
      server_ttft.push_back(r.server_ttft_s);
      transfer.push_back(r.kv_transfer_s);
      tail.push_back(r.kv_tail_s);
      kv_bytes += r.kv_bytes;
      draft_tokens += r.spec_draft_tokens;
      accepted_tokens += r.spec_accepted_tokens;
      mask_s += r.mask_s;
      decoded_tokens += std::max(0, r.output_tokens - 1);  // the first is the prefill worker's
    }
    j["server_timings"] = {{"queue_ms", SummaryJson(Summarize(queue))},
                           {"ttft_ms", SummaryJson(Summarize(server_ttft))},
                           {"kv_transfer_ms", SummaryJson(Summarize(transfer))},
                           {"kv_tail_ms", SummaryJson(Summarize(tail))},
                           {"mean_kv_bytes", n ? static_cast<double>(kv_bytes) / n : 0.0}};
    j["prefix_cache"] = PrefixCacheJson(load.outcomes);
    j["prefix_cache"]["workers"] =
        WorkerPrefixCacheJson(workers_before, ClusterStatusOrEmpty(**client, log));
    j["spec_decode"] = {
        {"draft_tokens", draft_tokens},
        {"accepted_tokens", accepted_tokens},
        {"acceptance_rate",
         draft_tokens ? static_cast<double>(accepted_tokens) / draft_tokens : 0.0}};
    // Structured output's cost per decoded token (masking and advancing the grammar), beside
    // the time per output token: what it adds to a step, at this run's batch.
    j["structured_output"] = {
        {"mask_us_per_token", decoded_tokens ? 1e6 * mask_s / decoded_tokens : 0.0},
        {"decoded_tokens", decoded_tokens}};
  }

  if (options.keep_requests) {
    nlohmann::json per = {{"ok", nlohmann::json::array()},        {"error", nlohmann::json::array()},
                          {"input_lens", nlohmann::json::array()}, {"output_lens", nlohmann::json::array()},
                          {"ttfts", nlohmann::json::array()},      {"tpots", nlohmann::json::array()},
                          {"e2els", nlohmann::json::array()},      {"itls", nlohmann::json::array()},
                          {"generated_texts", nlohmann::json::array()}};
    for (const RequestOutcome& r : load.outcomes) {
      per["ok"].push_back(r.ok);
      per["error"].push_back(r.ok ? nlohmann::json() : nlohmann::json(r.error));
      per["input_lens"].push_back(r.prompt_tokens);
      per["output_lens"].push_back(r.output_tokens);
      per["ttfts"].push_back(r.ttft_s);
      const std::optional<double> tpot = Tpot(r);
      per["tpots"].push_back(tpot ? nlohmann::json(*tpot) : nlohmann::json());
      per["e2els"].push_back(r.e2e_s);
      per["itls"].push_back(r.itl_s);
      per["generated_texts"].push_back(r.text);
    }
    j["requests"] = std::move(per);
  }
  return ServeBenchResult{.json = std::move(j), .outcomes = std::move(load.outcomes)};
}

std::string FormatServeTable(const nlohmann::json& r) {
  auto num = [&](const char* key) {
    const auto it = r.find(key);
    return it != r.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  std::string out;
  auto line = [&](const std::string& label, const std::string& value) {
    absl::StrAppendFormat(&out, "%-42s%s\n", label, value);
  };
  absl::StrAppend(&out, "============ Serving Benchmark Result ============\n");
  line("Server:", absl::StrCat(r.value("protocol", ""), " ", r.value("server", "")));
  if (r.contains("request_rate") && !r["request_rate"].is_null()) {
    line("Load:", absl::StrCat("Poisson, ", r["request_rate"].dump(), " requests/s"));
  } else if (r.contains("concurrency") && !r["concurrency"].is_null()) {
    line("Load:", absl::StrCat(r["concurrency"].dump(), " requests in flight"));
  } else if (r.contains("phases")) {
    line("Load:", absl::StrCat("Poisson, in ", r["phases"].size(), " phases"));
  }
  line("Successful requests:", absl::StrCat(r.value("completed", 0)));
  line("Failed requests:", absl::StrCat(r.value("failed", 0)));
  if (r.contains("errors")) {
    for (const auto& [code, count] : r["errors"].items()) {
      line(absl::StrCat("  ", code, ":"), count.dump());
    }
  }
  line("Benchmark duration (s):", absl::StrFormat("%.2f", num("duration")));
  line("Total input tokens:", absl::StrCat(r.value("total_input_tokens", int64_t{0})));
  if (r.contains("prompt_tokens_check")) {
    const nlohmann::json& c = r["prompt_tokens_check"];
    line("  prompt tokens, target -> actual (mean):",
         absl::StrFormat("%.1f -> %.1f (%.0f%% exact, worst off by %d)",
                         c.value("target_mean", 0.0), c.value("actual_mean", 0.0),
                         100 * c.value("exact_fraction", 0.0), c.value("max_abs_error", 0)));
  }
  line("Total generated tokens:", absl::StrCat(r.value("total_output_tokens", int64_t{0})));
  line("Request throughput (req/s):", absl::StrFormat("%.2f", num("request_throughput")));
  if (r.contains("request_goodput") && !r["request_goodput"].is_null()) {
    std::string slo;
    if (!r["slo_ttft_ms"].is_null()) absl::StrAppendFormat(&slo, "TTFT <= %g ms", num("slo_ttft_ms"));
    if (!r["slo_tpot_ms"].is_null()) {
      absl::StrAppendFormat(&slo, "%sTPOT <= %g ms", slo.empty() ? "" : ", ", num("slo_tpot_ms"));
    }
    line("Request goodput (req/s):",
         absl::StrFormat("%.2f  (%d good: %s)", num("request_goodput"),
                         r.value("good_requests", 0), slo));
  }
  line("Output token throughput (tok/s):", absl::StrFormat("%.2f", num("output_throughput")));
  line("Total token throughput (tok/s):", absl::StrFormat("%.2f", num("total_token_throughput")));
  absl::StrAppendFormat(&out, "%-10s%12s%12s%12s%12s%12s\n", "(ms)", "mean", "median", "p90",
                        "p99", "max");
  for (const auto& [label, key] : {std::pair{"TTFT", "ttft"}, std::pair{"TPOT", "tpot"},
                                   std::pair{"ITL", "itl"}, std::pair{"E2E", "e2el"}}) {
    absl::StrAppendFormat(&out, "%-10s%12.2f%12.2f%12.2f%12.2f%12.2f\n", label,
                          num(absl::StrCat("mean_", key, "_ms").c_str()),
                          num(absl::StrCat("median_", key, "_ms").c_str()),
                          num(absl::StrCat("p90_", key, "_ms").c_str()),
                          num(absl::StrCat("p99_", key, "_ms").c_str()),
                          num(absl::StrCat("max_", key, "_ms").c_str()));
  }
  if (r.contains("phases")) {
    int k = 0;
    for (const nlohmann::json& p : r["phases"]) {
      absl::StrAppendFormat(
          &out,
          "phase %d: %d in / %d out x %d at %g req/s: goodput %.2f req/s, TTFT p99 %.0f ms, "
          "TPOT p99 %.1f ms\n",
          ++k, p.value("input_len", 0), p.value("output_len", 0), p.value("num_prompts", 0),
          p.value("request_rate", 0.0),
          p.contains("request_goodput") && p["request_goodput"].is_number()
              ? p["request_goodput"].get<double>()
              : 0.0,
          p.value("p99_ttft_ms", 0.0), p.value("p99_tpot_ms", 0.0));
    }
  }
  if (r.contains("server_timings")) {
    const nlohmann::json& s = r["server_timings"];
    absl::StrAppendFormat(
        &out,
        "router: queue %.2f ms, TTFT %.2f ms, KV hand-off %.2f ms (%.2f ms after the prefill "
        "compute) for %.0f bytes (means)\n",
        s["queue_ms"].value("mean", 0.0), s["ttft_ms"].value("mean", 0.0),
        s["kv_transfer_ms"].value("mean", 0.0),
        s.contains("kv_tail_ms") ? s["kv_tail_ms"].value("mean", 0.0) : 0.0,
        s.value("mean_kv_bytes", 0.0));
  }
  if (r.contains("prefix_cache")) {
    const nlohmann::json& p = r["prefix_cache"];
    absl::StrAppendFormat(
        &out,
        "prefix cache: prefill computed %d of %d prompt tokens (%.1f%% cached); decode worker "
        "held %.1f%%; KV handed off %d bytes\n",
        p.value("prefill_computed_tokens", int64_t{0}), p.value("prompt_tokens", int64_t{0}),
        100.0 * p.value("prefill_hit_rate", 0.0), 100.0 * p.value("decode_hit_rate", 0.0),
        p.value("kv_bytes_handed_off", int64_t{0}));
    for (const nlohmann::json& w : p.value("workers", nlohmann::json::array())) {
      absl::StrAppendFormat(
          &out, "  %s %s: %.1f%% of tokens, %.1f%% of blocks hit; %d blocks evicted\n",
          w.value("role", ""), w.value("address", ""), 100.0 * w.value("token_hit_rate", 0.0),
          100.0 * w.value("block_hit_rate", 0.0), w.value("evicted_blocks", int64_t{0}));
    }
  }
  if (r.contains("spec_decode") && r["spec_decode"].value("draft_tokens", 0) > 0) {
    const nlohmann::json& s = r["spec_decode"];
    absl::StrAppendFormat(&out,
                          "speculative decoding: %d of %d proposed tokens accepted (%.1f%%)\n",
                          s.value("accepted_tokens", 0), s.value("draft_tokens", 0),
                          100.0 * s.value("acceptance_rate", 0.0));
  }
  absl::StrAppend(&out, "==================================================\n");
  return out;
}

}  // namespace baton::bench
