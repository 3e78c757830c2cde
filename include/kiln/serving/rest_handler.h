// The REST API, independent of the transport: TF Serving's /v1 paths, KServe v2 paths and the
// Prometheus endpoint. HttpServer feeds it requests; tests may call Handle() directly.
#pragma once

#include <string>

#include "kiln/serving/metrics.h"
#include "kiln/serving/server_core.h"

namespace kiln::serving {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and optional query
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  bool gzip = false;  // `body` is gzip-compressed (sent with Content-Encoding: gzip)
};

// TF Serving's mapping of status codes to HTTP codes.
int HttpStatusFromCode(absl::StatusCode code);
// {"error": "<message>"} with the mapped HTTP status.
HttpResponse ErrorResponse(const absl::Status& status);

class RestHandler {
 public:
  // `metrics_path` empty: no Prometheus endpoint.
  RestHandler(ServerCore* core, ServingMetrics* metrics, std::string metrics_path);

  HttpResponse Handle(const HttpRequest& request) const;

 private:
  HttpResponse Route(const HttpRequest& request) const;  // Handle without its guard
  HttpResponse HandleV1(const HttpRequest& request, absl::string_view path) const;
  HttpResponse HandleV2(const HttpRequest& request, absl::string_view path) const;

  ServerCore* const core_;
  ServingMetrics* const metrics_;
  const std::string metrics_path_;
};

}  // namespace kiln::serving
