#include "router/request_admission.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace baton::router {

absl::StatusOr<std::shared_ptr<RequestDriver>> CreateDriver(const GenerateEnv& env,
                                                            const v1::GenerateRequest& request,
                                                            const std::string& request_id,
                                                            absl::Time received,
                                                            absl::Time deadline,
                                                            ResponseSink* sink) {
  if (env.draining != nullptr && env.draining->load()) {
    return absl::UnavailableError("the router is shutting down");
  }
  if (request_id.size() > kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("request_id is ", request_id.size(),
                                                   " bytes long, at most ", kMaxRequestIdBytes,
                                                   " are allowed"));
  }
  if (absl::Status added = env.driver.table->Add(request_id); !added.ok()) return added;
  return std::make_shared<RequestDriver>(env.driver, request, request_id, received, deadline,
                                         sink);
}

absl::Status LaunchDriver(const GenerateEnv& env, std::shared_ptr<RequestDriver> driver,
                          std::shared_ptr<void> keep_alive) {
  RequestTable& table = *env.driver.table;
  const std::string request_id = driver->request_id();
  absl::Status admitted = absl::OkStatus();
  // Every request thread busy: the request waits for one in the router's queue (bounded).
  if (env.pool->Saturated()) admitted = table.SetState(request_id, v1::REQUEST_STATE_QUEUED);
  if (admitted.ok() &&
      !env.pool->Submit([driver = std::move(driver), keep_alive = std::move(keep_alive)] {
        driver->Run();
      })) {
    admitted = absl::UnavailableError("the router is shutting down");
  }
  if (!admitted.ok()) table.SetState(request_id, v1::REQUEST_STATE_FAILED).IgnoreError();
  return admitted;
}

}  // namespace baton::router
