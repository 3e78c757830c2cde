#include "kiln/serving/health_service.h"

#include <chrono>

namespace kiln::serving {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

HealthServiceImpl::HealthServiceImpl(const ServerCore* core, const std::atomic<bool>* draining,
                                     std::set<std::string> server_services)
    : core_(core), draining_(draining), server_services_(std::move(server_services)) {}

HealthServiceImpl::~HealthServiceImpl() { Shutdown(); }

void HealthServiceImpl::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
  }
  cv_.notify_all();
}

HealthCheckResponse::ServingStatus HealthServiceImpl::StatusOf(const std::string& service) const {
  const bool draining = draining_ != nullptr && draining_->load();
  if (service.empty() || server_services_.count(service) > 0) {
    return !draining && core_->AllModelsAvailable() ? HealthCheckResponse::SERVING
                                                    : HealthCheckResponse::NOT_SERVING;
  }
  for (const std::string& model : core_->ModelNames()) {
    if (model != service) continue;
    ModelSpecRef spec;
    spec.name = model;
    return !draining && core_->Lookup(spec).ok() ? HealthCheckResponse::SERVING
                                                 : HealthCheckResponse::NOT_SERVING;
  }
  return HealthCheckResponse::SERVICE_UNKNOWN;
}

grpc::Status HealthServiceImpl::Check(grpc::ServerContext*, const HealthCheckRequest* request,
                                      HealthCheckResponse* response) {
  const auto status = StatusOf(request->service());
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "unknown service \"" + request->service() +
                            "\": ask for \"\", a service on this port or a model name");
  }
  response->set_status(status);
  return grpc::Status::OK;
}

grpc::Status HealthServiceImpl::Watch(grpc::ServerContext* context,
                                      const HealthCheckRequest* request,
                                      grpc::ServerWriter<HealthCheckResponse>* writer) {
  bool sent = false;
  HealthCheckResponse::ServingStatus last = HealthCheckResponse::UNKNOWN;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    const bool stopping = shutdown_;
    lock.unlock();
    const auto status = stopping ? HealthCheckResponse::NOT_SERVING : StatusOf(request->service());
    if (!sent || status != last) {
      HealthCheckResponse response;
      response.set_status(status);
      if (!writer->Write(response)) return grpc::Status::OK;  // the client went away
      sent = true;
      last = status;
    }
    if (stopping) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
    }
    if (context->IsCancelled()) return grpc::Status::CANCELLED;
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(kWatchPollMillis), [this] { return shutdown_; });
  }
}

}  // namespace kiln::serving
