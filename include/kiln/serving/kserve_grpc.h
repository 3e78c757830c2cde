// KServe v2 / Open Inference Protocol over gRPC: inference.GRPCInferenceService (KServe's
// grpc_predict_v2.proto) on the same port as TF Serving's services, serving the same models
// as REST's /v2 routes (the serving_default signature).
//
// ModelInfer takes each input either as typed `contents` or as `raw_input_contents` (the
// tensor's bytes, row-major, little-endian; BYTES elements each a 4-byte little-endian length
// and the bytes). The reply mirrors the request: raw inputs get `raw_output_contents`, typed
// inputs get typed contents (FP16 and BF16 are always raw: the proto has no field for them).
// RepositoryModelLoad/Unload answer UNIMPLEMENTED: models are managed by the model config,
// as in TF Serving.
#pragma once

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "kiln/core/tensor.h"
#include "kiln/serving/grpc_service.h"
#include "kiln/serving/json_tensor.h"
#include "kiln/serving/metrics.h"
#include "kiln/serving/server_core.h"
#include "kserve/grpc_predict_v2.grpc.pb.h"

namespace kiln::serving {

class KServeGrpcService final : public inference::GRPCInferenceService::Service {
 public:
  // `draining` (may be null): set at SIGTERM, from then ServerReady answers false.
  KServeGrpcService(ServerCore* core, ServingMetrics* metrics, RpcCounter* counter,
                    const std::atomic<bool>* draining)
      : core_(core), metrics_(metrics), counter_(counter), draining_(draining) {}

  grpc::Status ServerLive(grpc::ServerContext* context, const inference::ServerLiveRequest* request,
                          inference::ServerLiveResponse* response) override;
  grpc::Status ServerReady(grpc::ServerContext* context,
                           const inference::ServerReadyRequest* request,
                           inference::ServerReadyResponse* response) override;
  grpc::Status ModelReady(grpc::ServerContext* context, const inference::ModelReadyRequest* request,
                          inference::ModelReadyResponse* response) override;
  grpc::Status ServerMetadata(grpc::ServerContext* context,
                              const inference::ServerMetadataRequest* request,
                              inference::ServerMetadataResponse* response) override;
  grpc::Status ModelMetadata(grpc::ServerContext* context,
                             const inference::ModelMetadataRequest* request,
                             inference::ModelMetadataResponse* response) override;
  grpc::Status ModelInfer(grpc::ServerContext* context, const inference::ModelInferRequest* request,
                          inference::ModelInferResponse* response) override;

 private:
  ServerCore* const core_;
  ServingMetrics* const metrics_;
  RpcCounter* const counter_;
  const std::atomic<bool>* const draining_;
};

}  // namespace kiln::serving
