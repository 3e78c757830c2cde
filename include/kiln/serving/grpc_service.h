// TF Serving's gRPC services (tensorflow.serving.PredictionService and ModelService) on top of
// ServerCore, so that unchanged TF Serving clients work.
#pragma once

#include <atomic>
#include <exception>
#include <new>

#include "absl/strings/str_cat.h"
#include "kiln/serving/metrics.h"
#include "kiln/serving/server_core.h"
#include "tensorflow_serving/apis/model_service.grpc.pb.h"
#include "tensorflow_serving/apis/prediction_service.grpc.pb.h"

namespace kiln::serving {

class RequestLoggers;

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::StatusOr<ModelSpecRef> SpecFromProto(const tensorflow::serving::ModelSpec& spec);

// Runs one RPC's work; an exception that escapes it (a failed allocation while decoding or
// encoding) becomes this RPC's error instead of gRPC's "Unexpected error in RPC handling".
template <typename Fn>
absl::Status GuardedRpc(Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory while handling this request");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("unexpected error: ", e.what()));
  }
}

// Counts the RPCs whose handlers are running. At shutdown, once none has run for a while, the
// server can drop the idle client connections instead of waiting for the clients to notice its
// GOAWAY (an idle gRPC client channel only polls every few seconds).
class RpcCounter {
 public:
  class Scope {
   public:
    explicit Scope(RpcCounter* counter) : counter_(counter) {
      if (counter_ != nullptr) counter_->active_.fetch_add(1);
    }
    ~Scope() {
      if (counter_ != nullptr) counter_->active_.fetch_sub(1);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    RpcCounter* const counter_;
  };
  int active() const { return active_.load(); }

 private:
  std::atomic<int> active_{0};
};

class PredictionServiceImpl final : public tensorflow::serving::PredictionService::Service {
 public:
  PredictionServiceImpl(ServerCore* core, ServingMetrics* metrics, RpcCounter* counter = nullptr)
      : core_(core), metrics_(metrics), counter_(counter) {}

  grpc::Status Predict(grpc::ServerContext* context,
                       const tensorflow::serving::PredictRequest* request,
                       tensorflow::serving::PredictResponse* response) override;
  grpc::Status Classify(grpc::ServerContext* context,
                        const tensorflow::serving::ClassificationRequest* request,
                        tensorflow::serving::ClassificationResponse* response) override;
  grpc::Status Regress(grpc::ServerContext* context,
                       const tensorflow::serving::RegressionRequest* request,
                       tensorflow::serving::RegressionResponse* response) override;
  grpc::Status MultiInference(grpc::ServerContext* context,
                              const tensorflow::serving::MultiInferenceRequest* request,
                              tensorflow::serving::MultiInferenceResponse* response) override;
  grpc::Status GetModelMetadata(grpc::ServerContext* context,
                                const tensorflow::serving::GetModelMetadataRequest* request,
                                tensorflow::serving::GetModelMetadataResponse* response) override;

  // Models with a logging_config log a sampled share of their requests here (null: none).
  void set_request_loggers(RequestLoggers* loggers) { loggers_ = loggers; }

 private:
  // `version` and `signature`: what the request resolved to, "" when it did not get that far
  // (then only TF Serving's families count it).
  void Record(const std::string& model, const char* api, const absl::Status& status,
              int64_t start_ns, const std::string& version = "", const std::string& signature = "");
  // What Predict, Classify and Regress share around `run` (the answer from the servable that
  // the request's model_spec names): see grpc_service.cc. `log_of` picks the PredictionLog
  // field that a sampled request and its response are logged in.
  template <typename Request, typename Response, typename Run, typename LogOf>
  grpc::Status ServeModelSpec(grpc::ServerContext* context, const char* api, const Request* request,
                              Response* response, Run&& run, LogOf&& log_of);
  ServerCore* const core_;
  ServingMetrics* const metrics_;
  RpcCounter* const counter_;
  RequestLoggers* loggers_ = nullptr;
};

class ModelServiceImpl final : public tensorflow::serving::ModelService::Service {
 public:
  explicit ModelServiceImpl(ServerCore* core, RpcCounter* counter = nullptr)
      : core_(core), counter_(counter) {}

  // A reloaded config's logging_config entries are applied here too (null: none).
  void set_request_loggers(RequestLoggers* loggers) { loggers_ = loggers; }

  grpc::Status GetModelStatus(grpc::ServerContext* context,
                              const tensorflow::serving::GetModelStatusRequest* request,
                              tensorflow::serving::GetModelStatusResponse* response) override;
  grpc::Status HandleReloadConfigRequest(
      grpc::ServerContext* context, const tensorflow::serving::ReloadConfigRequest* request,
      tensorflow::serving::ReloadConfigResponse* response) override;

 private:
  ServerCore* const core_;
  RpcCounter* const counter_;
  RequestLoggers* loggers_ = nullptr;
};

}  // namespace kiln::serving
