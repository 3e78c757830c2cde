// grpc.health.v1.Health (grpc's health.proto) with TF Serving's meaning of "healthy": the
// server is SERVING once every configured model has an available version, and NOT_SERVING
// from SIGTERM on (while requests in flight drain), so that a load balancer or a Kubernetes
// gRPC probe stops sending traffic here.
//
// grpc++ ships a default health service, but its status is whatever the application sets by
// hand; this one reads the status from ServerCore on every Check and Watch poll, so it cannot
// drift from what the model manager actually serves.
//
// Service names: "" and the full names of the services on the port (e.g.
// "tensorflow.serving.PredictionService") mean the whole server; a model name means that model
// (SERVING when it has an available version). Any other name is unknown: Check answers
// NOT_FOUND and Watch sends SERVICE_UNKNOWN, as health.proto specifies.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "kiln/serving/server_core.h"

namespace kiln::serving {

// Thread safety: gRPC calls Check and Watch from its threads at once; they read ServerCore
// (itself thread-safe) and wait on cv_ until Shutdown().
class HealthServiceImpl final : public grpc::health::v1::Health::Service {
 public:
  // `draining` (may be null): set at SIGTERM. `server_services`: the full names of the gRPC
  // services registered next to this one.
  HealthServiceImpl(const ServerCore* core, const std::atomic<bool>* draining,
                    std::set<std::string> server_services);
  ~HealthServiceImpl() override;

  grpc::Status Check(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override;
  grpc::Status Watch(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>* writer) override;

  // Ends every Watch (each sends NOT_SERVING first); the server calls this when it stops.
  void Shutdown();

  // How often Watch re-reads the status: ServerCore has no change notification, and a read is
  // a map lookup under a mutex.
  static constexpr int kWatchPollMillis = 100;

 private:
  grpc::health::v1::HealthCheckResponse::ServingStatus StatusOf(const std::string& service) const;

  const ServerCore* const core_;
  const std::atomic<bool>* const draining_;
  const std::set<std::string> server_services_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kiln::serving
