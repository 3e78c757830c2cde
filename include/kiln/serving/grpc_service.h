// TF Serving's gRPC services (tensorflow.serving.PredictionService and ModelService) on top of
// ServerCore, so that unchanged TF Serving clients work.
#pragma once

#include "kiln/serving/metrics.h"
#include "kiln/serving/server_core.h"
#include "tensorflow_serving/apis/model_service.grpc.pb.h"
#include "tensorflow_serving/apis/prediction_service.grpc.pb.h"

namespace kiln::serving {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::StatusOr<ModelSpecRef> SpecFromProto(const tensorflow::serving::ModelSpec& spec);

class PredictionServiceImpl final : public tensorflow::serving::PredictionService::Service {
 public:
  PredictionServiceImpl(ServerCore* core, ServingMetrics* metrics)
      : core_(core), metrics_(metrics) {}

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

 private:
  void Record(const std::string& model, const char* api, const absl::Status& status,
              int64_t start_ns);
  ServerCore* const core_;
  ServingMetrics* const metrics_;
};

class ModelServiceImpl final : public tensorflow::serving::ModelService::Service {
 public:
  explicit ModelServiceImpl(ServerCore* core) : core_(core) {}

  grpc::Status GetModelStatus(grpc::ServerContext* context,
                              const tensorflow::serving::GetModelStatusRequest* request,
                              tensorflow::serving::GetModelStatusResponse* response) override;
  grpc::Status HandleReloadConfigRequest(
      grpc::ServerContext* context, const tensorflow::serving::ReloadConfigRequest* request,
      tensorflow::serving::ReloadConfigResponse* response) override;

 private:
  ServerCore* const core_;
};

}  // namespace kiln::serving
