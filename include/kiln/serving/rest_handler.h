// The REST API, independent of the transport: TF Serving's /v1 paths, KServe v2 paths and the
// Prometheus endpoint. HttpServer feeds it requests; tests may call Handle() directly.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "kiln/serving/explain.h"
#include "kiln/serving/metrics.h"
#include "kiln/serving/server_core.h"

namespace kiln::serving {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and optional query
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // as received
};

// The value of the first header named `name` (case-insensitive); empty when absent.
absl::string_view FindHeader(const HttpRequest& request, absl::string_view name);

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  bool gzip = false;  // `body` is gzip-compressed (sent with Content-Encoding: gzip)
  std::vector<std::pair<std::string, std::string>> headers;  // sent besides the above
};

// TF Serving's mapping of status codes to HTTP codes.
int HttpStatusFromCode(absl::StatusCode code);
// {"error": "<message>"} with the mapped HTTP status.
HttpResponse ErrorResponse(const absl::Status& status);

class RequestLoggers;

class RestHandler {
 public:
  // `metrics_path` empty: no Prometheus endpoint. `enable_cors_support`
  // (--rest_api_enable_cors_support): every reply of the API paths (/v1/..., /v2/...) carries
  // TF Serving's CORS headers (Access-Control-Allow-Origin: *, -Methods: POST, GET,
  // -Headers: Content-Type). A preflight (OPTIONS on an API path) is answered whether or not
  // it is on, as TF Serving does: 200 when it has an http(s) Origin, else 400.
  // `explain_max_evaluations` (--explain_max_evaluations): :explain's budget per request.
  RestHandler(ServerCore* core, ServingMetrics* metrics, std::string metrics_path,
              bool enable_cors_support = false,
              int64_t explain_max_evaluations = ExplainLimits{}.max_evaluations);

  HttpResponse Handle(const HttpRequest& request) const;

  // Models with a logging_config log a sampled share of their :predict requests here (as TF
  // Serving logs the PredictRequest its REST API converts the JSON to); null: none.
  void set_request_loggers(RequestLoggers* loggers) { loggers_ = loggers; }

 private:
  HttpResponse Route(const HttpRequest& request) const;  // Handle without its guard
  HttpResponse HandleV1(const HttpRequest& request, absl::string_view path) const;
  HttpResponse HandleV2(const HttpRequest& request, absl::string_view path) const;

  ServerCore* const core_;
  ServingMetrics* const metrics_;
  const std::string metrics_path_;
  const bool enable_cors_support_;
  const int64_t explain_max_evaluations_;
  RequestLoggers* loggers_ = nullptr;
};

}  // namespace kiln::serving
