// The SLO planner as an operator turns it on: `--planner` takes off, slo or recommend; slo and
// recommend need both targets, and a router running the planner publishes it on /metrics.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "cli/child_process.h"
#include "engine/synthetic_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/integration/local_cluster.h"
#include "tests/support/temp_path.h"

namespace baton {
namespace {

using test_support::CommandResult;
using test_support::RunBaton;
using testing::HasSubstr;

TEST(PlannerCliTest, ANameThatIsNoPlannerIsAUsageError) {
  const CommandResult r = RunBaton("router --planner fast");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--planner 'fast': use off, slo or recommend"));
}

TEST(PlannerCliTest, TheSloPlannerNeedsBothTargets) {
  // A model that is not there: were the targets not checked first, the router would fail on
  // the model (or, with one, keep running) instead.
  const CommandResult r =
      RunBaton("router --port 0 --model /nonexistent/model.gguf --planner slo --slo-ttft-ms 500");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("the SLO planner needs both targets"));
}

TEST(PlannerCliTest, ARouterRecommendingPublishesItsRecommendation) {
  const std::string dir = test_support::TempPath("planner-cli");
  std::filesystem::create_directories(dir);
  const std::string model = dir + "/model.gguf";
  ASSERT_TRUE(engine::WriteSyntheticModel(model, {.seed = 3}).ok());
  absl::StatusOr<std::unique_ptr<cli::ChildProcess>> router = cli::ChildProcess::Start(
      {test_support::BatonBinary(), "router", "--model", model, "--port", "0", "--http-port", "0",
       "--planner", "recommend", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "50",
       "--planner-interval-ms", "100", "--planner-dwell-s", "0"});
  ASSERT_TRUE(router.ok());
  absl::StatusOr<std::string> http =
      (*router)->WaitForLine("http listening on ", std::chrono::seconds(60));
  ASSERT_TRUE(http.ok()) << http.status();
  httplib::Client client("127.0.0.1", std::stoi(http->substr(http->rfind(':') + 1)));
  client.set_read_timeout(10, 0);
  // No workers: no side can meet anything, nobody to move; within a few evaluations.
  std::string body;
  for (int attempt = 0; attempt < 100; ++attempt) {
    httplib::Result metrics = client.Get("/metrics");
    ASSERT_TRUE(metrics) << httplib::to_string(metrics.error());
    body = metrics->body;
    if (body.find("baton:planner_pressure") != std::string::npos) break;
    usleep(100'000);
  }
  EXPECT_THAT(body, HasSubstr("baton:planner_recommended_workers{"));
  EXPECT_THAT(body, HasSubstr("role=\"decode\""));
  EXPECT_THAT(body, HasSubstr("role=\"both\""));
  EXPECT_THAT(body, HasSubstr("side=\"prefill\""));
  (*router)->Signal(SIGTERM);
  EXPECT_TRUE((*router)->Wait(std::chrono::seconds(30)).ok());
}

}  // namespace
}  // namespace baton
