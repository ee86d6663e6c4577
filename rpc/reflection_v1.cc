#include "rpc/reflection_v1.h"

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/health/v1/health.pb.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"
#include "grpcpp/impl/server_initializer.h"

namespace baton::rpc {
namespace {

namespace v1 = grpc::reflection::v1;
using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;

// Adds `file` and, depth first, the files it imports, each once.
void AddFileAndDependencies(const FileDescriptor* file, std::unordered_set<std::string>& seen,
                            v1::FileDescriptorResponse& out) {
  if (!seen.insert(file->name()).second) return;
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(out.add_file_descriptor_proto());
  for (int i = 0; i < file->dependency_count(); ++i) {
    AddFileAndDependencies(file->dependency(i), seen, out);
  }
}

// `file` with its dependencies, or NOT_FOUND naming `what` when there is none.
grpc::Status FileResponse(const FileDescriptor* file, const std::string& what,
                          v1::ServerReflectionResponse& response) {
  if (file == nullptr) return grpc::Status(grpc::StatusCode::NOT_FOUND, what + " not found");
  std::unordered_set<std::string> seen;
  AddFileAndDependencies(file, seen, *response.mutable_file_descriptor_response());
  return grpc::Status::OK;
}

class ReflectionService final : public v1::ServerReflection::CallbackService {
 public:
  void SetServiceNames(std::vector<std::string> names) {
    absl::MutexLock lock(&mu_);
    names_ = std::move(names);
  }

  grpc::ServerBidiReactor<v1::ServerReflectionRequest, v1::ServerReflectionResponse>*
  ServerReflectionInfo(grpc::CallbackServerContext* context) override;

  // What a stream answers to `request`.
  void Answer(const v1::ServerReflectionRequest& request,
              v1::ServerReflectionResponse& response) const {
    response.set_valid_host(request.host());
    *response.mutable_original_request() = request;
    const grpc::Status status = Dispatch(request, response);
    if (!status.ok()) {
      v1::ErrorResponse& error = *response.mutable_error_response();
      error.set_error_code(status.error_code());
      error.set_error_message(status.error_message());
    }
  }

 private:
  grpc::Status Dispatch(const v1::ServerReflectionRequest& request,
                        v1::ServerReflectionResponse& response) const {
    switch (request.message_request_case()) {
      case v1::ServerReflectionRequest::kListServices:
        ListServices(*response.mutable_list_services_response());
        return grpc::Status::OK;
      case v1::ServerReflectionRequest::kFileByFilename:
        return FileResponse(pool_.FindFileByName(request.file_by_filename()),
                            absl::StrCat("file '", request.file_by_filename(), "'"), response);
      case v1::ServerReflectionRequest::kFileContainingSymbol:
        return FileResponse(pool_.FindFileContainingSymbol(request.file_containing_symbol()),
                            absl::StrCat("symbol '", request.file_containing_symbol(), "'"),
                            response);
      case v1::ServerReflectionRequest::kFileContainingExtension:
        return FileContainingExtension(request.file_containing_extension(), response);
      case v1::ServerReflectionRequest::kAllExtensionNumbersOfType:
        return AllExtensionNumbers(request.all_extension_numbers_of_type(),
                                   *response.mutable_all_extension_numbers_response());
      default:
        return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "unknown reflection request");
    }
  }

  void ListServices(v1::ListServiceResponse& out) const {
    absl::MutexLock lock(&mu_);
    for (const std::string& name : names_) out.add_service()->set_name(name);
  }

  grpc::Status FileContainingExtension(const v1::ExtensionRequest& request,
                                       v1::ServerReflectionResponse& response) const {
    const Descriptor* type = pool_.FindMessageTypeByName(request.containing_type());
    if (type == nullptr) return TypeNotFound(request.containing_type());
    const FieldDescriptor* extension =
        pool_.FindExtensionByNumber(type, request.extension_number());
    return FileResponse(extension != nullptr ? extension->file() : nullptr,
                        absl::StrCat("extension ", request.extension_number(), " of type '",
                                     request.containing_type(), "'"),
                        response);
  }

  grpc::Status AllExtensionNumbers(const std::string& type_name,
                                   v1::ExtensionNumberResponse& out) const {
    const Descriptor* type = pool_.FindMessageTypeByName(type_name);
    if (type == nullptr) return TypeNotFound(type_name);
    std::vector<const FieldDescriptor*> extensions;
    pool_.FindAllExtensions(type, &extensions);
    out.set_base_type_name(type_name);
    for (const FieldDescriptor* extension : extensions) {
      out.add_extension_number(extension->number());
    }
    return grpc::Status::OK;
  }

  static grpc::Status TypeNotFound(const std::string& name) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("type '", name, "' not found"));
  }

  // The generated pool, with grpc.health.v1's file in it: referring to one of its types links
  // the file's registration (gRPC's built-in health service registers no descriptor).
  const DescriptorPool& pool_ =
      (grpc::health::v1::HealthCheckRequest::descriptor(), *DescriptorPool::generated_pool());
  mutable absl::Mutex mu_;
  std::vector<std::string> names_ ABSL_GUARDED_BY(mu_);
};

// One call: reads a request, writes its answer, reads the next, until the client half-closes.
// Owns its state; deletes itself when the call is done.
class ReflectionReactor final
    : public grpc::ServerBidiReactor<v1::ServerReflectionRequest, v1::ServerReflectionResponse> {
 public:
  explicit ReflectionReactor(const ReflectionService* service) : service_(*service) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client is done sending (or the call ended)
      Finish(grpc::Status::OK);
      return;
    }
    if (++n_requests_ > kMaxReflectionRequests) {
      Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          absl::StrCat("more than ", kMaxReflectionRequests,
                                       " reflection requests on one stream")));
      return;
    }
    response_.Clear();
    service_.Answer(request_, response_);
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the reflection stream broke"));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  const ReflectionService& service_;
  v1::ServerReflectionRequest request_;
  v1::ServerReflectionResponse response_;
  int n_requests_ = 0;
};

grpc::ServerBidiReactor<v1::ServerReflectionRequest, v1::ServerReflectionResponse>*
ReflectionService::ServerReflectionInfo(grpc::CallbackServerContext* /*context*/) {
  return new ReflectionReactor(this);
}

// Registers the service when the server is created (the server then owns it) and hands it the
// server's service list once every service, the health service included, is registered.
class ReflectionPlugin final : public grpc::ServerBuilderPlugin {
 public:
  std::string name() override { return "baton_reflection_v1"; }
  void InitServer(grpc::ServerInitializer* si) override { si->RegisterService(service_); }
  void Finish(grpc::ServerInitializer* si) override {
    service_->SetServiceNames(*si->GetServiceList());
  }
  void ChangeArguments(const std::string& /*name*/, void* /*value*/) override {}

 private:
  std::shared_ptr<ReflectionService> service_ = std::make_shared<ReflectionService>();
};

// Adds the plugin to one builder (gRPC's plugin factories are process-wide).
class ReflectionOption final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* /*args*/) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->push_back(std::make_unique<ReflectionPlugin>());
  }
};

}  // namespace

void AddReflectionV1(grpc::ServerBuilder& builder) {
  builder.SetOption(std::make_unique<ReflectionOption>());
}

}  // namespace baton::rpc
