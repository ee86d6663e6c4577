#include "cli/remote_generate.h"

#include <iostream>

#include "absl/strings/str_format.h"
#include "baton/v1/router.grpc.pb.h"
#include "cli/command.h"
#include "rpc/sampling_params_proto.h"
#include "rpc/status.h"

namespace baton::cli {

int RunRemoteGenerate(const RemoteGenerateOptions& options, const engine::SamplingParams& params) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      rpc::MakeChannel(options.address, options.client);
  if (!channel.ok()) return RunError("generate", channel.status());
  auto stub = baton::v1::Router::NewStub(*channel);
  baton::v1::GenerateRequest request;
  if (options.chat.empty()) {
    request.set_prompt(options.prompt);
  } else {
    for (const engine::ChatMessage& m : options.chat) {
      baton::v1::ChatMessage* message = request.mutable_chat()->add_messages();
      message->set_role(m.role);
      message->set_content(m.content);
    }
  }
  *request.mutable_sampling() = rpc::SamplingParamsToProto(params);

  grpc::ClientContext context;
  rpc::PrepareContext(context, options.client, std::chrono::system_clock::now() + options.timeout);
  std::unique_ptr<grpc::ClientReader<baton::v1::GenerateResponse>> reader =
      stub->Generate(&context, request);
  baton::v1::GenerateResponse response;
  baton::v1::GenerateResponse last;
  while (reader->Read(&response)) {
    std::cout << response.text() << std::flush;
    if (response.finish_reason() != baton::v1::FINISH_REASON_UNSPECIFIED) last = response;
  }
  grpc::Status status = reader->Finish();
  std::cout << "\n" << std::flush;
  if (!status.ok()) return RunError("generate", rpc::FromGrpcStatus(status));
  const auto& t = last.timings();
  std::cerr << absl::StrFormat(
      "baton generate: request %s: prompt %d tokens, %d generated, TTFT %.3f s, total %.3f s, "
      "KV handed off %d bytes in %.3f s (prefill %s, decode %s), finish: %s\n",
      last.request_id(), last.usage().prompt_tokens(), last.usage().completion_tokens(),
      t.ttft_seconds(), t.e2e_seconds(), t.kv_bytes(), t.kv_transfer_seconds(), t.prefill_worker(),
      t.decode_worker(), baton::v1::FinishReason_Name(last.finish_reason()));
  return 0;
}

}  // namespace baton::cli
