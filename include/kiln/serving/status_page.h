// The status page at "/" and "/status" on the REST port: what an operator wants to see of one
// server at a glance. Server version, uptime and whether it is draining; every flag's value;
// every model with its versions, their states and load errors; requests per second and
// latency percentiles per model version, signature, API and entrypoint; the batch queues; each
// loaded version's signatures and optimization log (and whether compression was allowed).
//
// The numbers come from ServingMetrics, the counters Prometheus scrapes, so the page and a
// dashboard never disagree: rates and percentiles over the last seconds are differences of
// those counters and histogram buckets between two renders (the page keeps the counters of
// its recent renders), computed as Prometheus' rate() and histogram_quantile() do.
//
// Plain HTML and CSS from the server, no external assets. Everything is in the HTML, so the
// page is complete without JavaScript (a <noscript> meta refresh reloads it every few
// seconds); with JavaScript, a few lines replace only the live part every few seconds, so an
// open <details> stays open.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "kiln/serving/metrics.h"
#include "kiln/serving/rest_handler.h"
#include "kiln/serving/server.h"
#include "kiln/serving/server_core.h"

namespace kiln::serving {

struct StatusPageOptions {
  std::string version;  // as `--version` prints it
  std::vector<ServeFlagValue> flags;
  bool allow_compression = false;
  bool batching = false;
  int refresh_seconds = 5;
};

// Thread safety: Handle() may be called from any thread at once (HTTP handler threads); the
// sample window and the inspect cache are guarded by mu_.
class StatusPage {
 public:
  // `draining`: set once the server received SIGTERM (may be null).
  StatusPage(const ServerCore* core, const ServingMetrics* metrics, StatusPageOptions options,
             const std::atomic<bool>* draining);

  // GET or HEAD of "/" or "/status" (a query string is ignored).
  static bool Serves(const HttpRequest& request);
  HttpResponse Handle(const HttpRequest& request) const;
  // The page as of now.
  std::string Render() const;

 private:
  using Clock = std::chrono::steady_clock;
  // Histogram series of signature_request_latency at one render: labels -> bucket counts
  // (+Inf last).
  struct Sample {
    Clock::time_point time;
    std::map<std::vector<std::string>, std::vector<uint64_t>> buckets;
  };

  std::string RenderLive(const Sample& now, const Sample* before) const;
  std::string RenderDetails() const;
  std::string RenderFlags() const;

  const ServerCore* const core_;
  const ServingMetrics* const metrics_;
  const StatusPageOptions options_;
  const std::atomic<bool>* const draining_;
  const Clock::time_point start_;
  const std::chrono::system_clock::time_point start_wall_;

  mutable std::mutex mu_;
  // Samples of the last 30 s, oldest first (see Render for the window they give).
  mutable std::deque<Sample> samples_ ABSL_GUARDED_BY(mu_);
  // Model::Inspect() per "name/version/path": it compiles a plan once, so it is kept.
  mutable std::map<std::string, std::string> inspect_cache_ ABSL_GUARDED_BY(mu_);
};

// The latency (same unit as the buckets) below which `q` (0..1) of the observations fall, by
// linear interpolation inside the bucket, as Prometheus' histogram_quantile(). `counts` has one
// entry per bucket bound plus the +Inf bucket; the result is the last finite bound when the
// quantile falls into +Inf, and -1 without observations.
double HistogramQuantile(const std::vector<double>& bounds, const std::vector<uint64_t>& counts,
                         double q);

}  // namespace kiln::serving
