// Server reflection v1 on a StartServer server over loopback, through the generated v1 client:
// list_services names what the server registered, files come with their transitive dependencies,
// unknown names are NOT_FOUND, a stream's length is bounded; v1alpha (gRPC's plugin) still answers.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/v1/router.grpc.pb.h"
#include "baton/v1/worker.grpc.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/descriptor_database.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "rpc/reflection_v1.h"
#include "rpc/server_options.h"

namespace baton::rpc {
namespace {

namespace refl = grpc::reflection::v1;
using testing::Contains;
using testing::IsSupersetOf;

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(30);
}

refl::ServerReflectionRequest ListServices() {
  refl::ServerReflectionRequest request;
  request.set_list_services("*");
  return request;
}

refl::ServerReflectionRequest FileContainingSymbol(const std::string& symbol) {
  refl::ServerReflectionRequest request;
  request.set_file_containing_symbol(symbol);
  return request;
}

std::vector<std::string> ServiceNames(const refl::ServerReflectionResponse& response) {
  std::vector<std::string> names;
  for (const refl::ServiceResponse& s : response.list_services_response().service()) {
    names.push_back(s.name());
  }
  return names;
}

// The files of a file_descriptor_response, as a pool that resolves names across them: a name
// resolves only if every file it needs, transitively, was sent.
class ReceivedFiles {
 public:
  explicit ReceivedFiles(const refl::ServerReflectionResponse& response) {
    for (const std::string& bytes : response.file_descriptor_response().file_descriptor_proto()) {
      google::protobuf::FileDescriptorProto file;
      EXPECT_TRUE(file.ParseFromString(bytes));
      names_.push_back(file.name());
      EXPECT_TRUE(database_.Add(file)) << file.name();
    }
  }
  const std::vector<std::string>& names() const { return names_; }
  const google::protobuf::DescriptorPool& pool() const { return pool_; }

 private:
  std::vector<std::string> names_;
  google::protobuf::SimpleDescriptorDatabase database_;
  google::protobuf::DescriptorPool pool_{&database_};
};

class ReflectionV1Test : public testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<StartedServer> started = StartServer({}, {&router_, &decode_});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(*started);
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        MakeChannel(absl::StrCat("127.0.0.1:", server_.port), {});
    ASSERT_TRUE(channel.ok()) << channel.status();
    channel_ = *channel;
    stub_ = refl::ServerReflection::NewStub(channel_);
  }
  void TearDown() override {
    if (server_.server) server_.server->Shutdown(std::chrono::system_clock::now());
  }

  // Sends `requests` on one stream, each answered before the next is sent; the answers.
  std::vector<refl::ServerReflectionResponse> Ask(
      const std::vector<refl::ServerReflectionRequest>& requests,
      grpc::Status* status = nullptr) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    auto stream = stub_->ServerReflectionInfo(&context);
    std::vector<refl::ServerReflectionResponse> answers;
    for (const refl::ServerReflectionRequest& request : requests) {
      refl::ServerReflectionResponse response;
      if (!stream->Write(request) || !stream->Read(&response)) break;
      answers.push_back(std::move(response));
    }
    stream->WritesDone();
    const grpc::Status finished = stream->Finish();
    if (status != nullptr) *status = finished;
    return answers;
  }

  refl::ServerReflectionResponse AskOne(const refl::ServerReflectionRequest& request) {
    grpc::Status status;
    std::vector<refl::ServerReflectionResponse> answers = Ask({request}, &status);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(answers.size(), 1u);
    return answers.empty() ? refl::ServerReflectionResponse() : answers[0];
  }

  baton::v1::Router::CallbackService router_;
  baton::v1::DecodeWorker::CallbackService decode_;
  StartedServer server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<refl::ServerReflection::Stub> stub_;
};

TEST_F(ReflectionV1Test, ListServicesNamesEveryServiceTheServerRegistered) {
  refl::ServerReflectionRequest request = ListServices();
  request.set_host("some-host");
  const refl::ServerReflectionResponse response = AskOne(request);
  EXPECT_THAT(ServiceNames(response),
              IsSupersetOf({"baton.v1.Router", "baton.v1.DecodeWorker", "grpc.health.v1.Health",
                            "grpc.reflection.v1.ServerReflection",
                            "grpc.reflection.v1alpha.ServerReflection"}));
  EXPECT_EQ(response.valid_host(), "some-host");
  EXPECT_EQ(response.original_request().list_services(), "*");
}

// The health service that Kubernetes' gRPC probes call, which ListServices names, is described
// too (grpcurl describe grpc.health.v1.Health).
TEST_F(ReflectionV1Test, DescribesTheHealthService) {
  const ReceivedFiles files(AskOne(FileContainingSymbol("grpc.health.v1.Health")));
  EXPECT_THAT(files.names(), testing::Contains("grpc/health/v1/health.proto"));
  const google::protobuf::ServiceDescriptor* health =
      files.pool().FindServiceByName("grpc.health.v1.Health");
  ASSERT_NE(health, nullptr);
  ASSERT_NE(health->FindMethodByName("Check"), nullptr);
  EXPECT_EQ(health->FindMethodByName("Check")->input_type()->full_name(),
            "grpc.health.v1.HealthCheckRequest");
}

TEST_F(ReflectionV1Test, FileContainingSymbolSendsTheFileAndItsDependencies) {
  const refl::ServerReflectionResponse response =
      AskOne(FileContainingSymbol("baton.v1.Router"));
  ASSERT_TRUE(response.has_file_descriptor_response()) << response.DebugString();
  const ReceivedFiles files(response);
  ASSERT_FALSE(files.names().empty());
  EXPECT_EQ(files.names()[0], "baton/v1/router.proto");
  EXPECT_THAT(files.names(), Contains("baton/v1/common.proto"));
  // Everything the service's methods and messages use resolves from what was sent.
  const google::protobuf::ServiceDescriptor* router =
      files.pool().FindServiceByName("baton.v1.Router");
  ASSERT_NE(router, nullptr);
  EXPECT_GT(router->method_count(), 0);
}

TEST_F(ReflectionV1Test, SymbolsInsideAFileResolveToIt) {
  const std::string method = absl::StrCat(
      "baton.v1.DecodeWorker.",
      google::protobuf::DescriptorPool::generated_pool()
          ->FindServiceByName("baton.v1.DecodeWorker")
          ->method(0)
          ->name());
  const ReceivedFiles files(AskOne(FileContainingSymbol(method)));
  ASSERT_FALSE(files.names().empty());
  EXPECT_EQ(files.names()[0], "baton/v1/worker.proto");
}

TEST_F(ReflectionV1Test, FileByFilename) {
  refl::ServerReflectionRequest request;
  request.set_file_by_filename("baton/v1/worker.proto");
  const ReceivedFiles files(AskOne(request));
  ASSERT_FALSE(files.names().empty());
  EXPECT_EQ(files.names()[0], "baton/v1/worker.proto");
  EXPECT_NE(files.pool().FindServiceByName("baton.v1.DecodeWorker"), nullptr);
}

TEST_F(ReflectionV1Test, UnknownNamesAreNotFoundAndTheStreamGoesOn) {
  refl::ServerReflectionRequest unknown_file;
  unknown_file.set_file_by_filename("baton/v1/no_such.proto");
  refl::ServerReflectionRequest unknown_type;
  unknown_type.set_all_extension_numbers_of_type("baton.v1.NoSuchMessage");
  refl::ServerReflectionRequest unknown_extension;
  unknown_extension.mutable_file_containing_extension()->set_containing_type(
      "baton.v1.NoSuchMessage");
  refl::ServerReflectionRequest no_such_number;
  no_such_number.mutable_file_containing_extension()->set_containing_type(
      "google.protobuf.FieldOptions");
  no_such_number.mutable_file_containing_extension()->set_extension_number(536000000);
  grpc::Status status;
  const std::vector<refl::ServerReflectionResponse> answers =
      Ask({FileContainingSymbol("baton.v1.NoSuchService"), unknown_file, unknown_type,
           unknown_extension, no_such_number, ListServices()},
          &status);
  EXPECT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(answers.size(), 6u);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(answers[i].has_error_response()) << i << ": " << answers[i].DebugString();
    EXPECT_EQ(answers[i].error_response().error_code(), grpc::StatusCode::NOT_FOUND) << i;
  }
  EXPECT_THAT(answers[0].error_response().error_message(),
              testing::HasSubstr("baton.v1.NoSuchService"));
  EXPECT_THAT(ServiceNames(answers[5]), Contains("baton.v1.Router"));
}

TEST_F(ReflectionV1Test, AllExtensionNumbersOfAKnownType) {
  refl::ServerReflectionRequest request;
  request.set_all_extension_numbers_of_type("baton.v1.GenerateRequest");
  const refl::ServerReflectionResponse response = AskOne(request);
  ASSERT_TRUE(response.has_all_extension_numbers_response()) << response.DebugString();
  EXPECT_EQ(response.all_extension_numbers_response().base_type_name(),
            "baton.v1.GenerateRequest");
  EXPECT_EQ(response.all_extension_numbers_response().extension_number_size(), 0);
}

TEST_F(ReflectionV1Test, AStreamAnswersAtMostTheLimitThenEnds) {
  const std::vector<refl::ServerReflectionRequest> requests(kMaxReflectionRequests + 1,
                                                            ListServices());
  grpc::Status status;
  const std::vector<refl::ServerReflectionResponse> answers = Ask(requests, &status);
  EXPECT_EQ(answers.size(), static_cast<size_t>(kMaxReflectionRequests));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // A new stream starts afresh.
  EXPECT_THAT(ServiceNames(AskOne(ListServices())), Contains("baton.v1.Router"));
}

// gRPC's own v1alpha service, asked with v1's messages (the two are the same on the wire).
TEST_F(ReflectionV1Test, V1AlphaStillAnswers) {
  grpc::TemplatedGenericStub<refl::ServerReflectionRequest, refl::ServerReflectionResponse> stub(
      channel_);
  grpc::CompletionQueue cq;
  auto next = [&cq] {
    void* tag = nullptr;
    bool ok = false;
    return cq.Next(&tag, &ok) && ok;
  };
  refl::ServerReflectionResponse response;
  grpc::Status status;
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    auto call =
        stub.PrepareCall(&context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                         &cq);
    ASSERT_NE(call, nullptr);
    call->StartCall(nullptr);
    bool ok = next();
    if (ok) {
      call->Write(ListServices(), nullptr);
      ok = next();
    }
    if (ok) {
      call->Read(&response, nullptr);
      ok = next();
    }
    if (ok) {
      call->WritesDone(nullptr);
      ok = next();
    }
    call->Finish(&status, nullptr);
    next();
    EXPECT_TRUE(ok);
  }
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(ServiceNames(response),
              IsSupersetOf({"baton.v1.Router", "grpc.reflection.v1.ServerReflection"}));
}

}  // namespace
}  // namespace baton::rpc
