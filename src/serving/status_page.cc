#include "kiln/serving/status_page.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kiln/runtime/model.h"

namespace kiln::serving {
namespace {

using tensorflow::serving::ModelVersionStatus;

std::string Escape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out.append("&amp;");
        break;
      case '<':
        out.append("&lt;");
        break;
      case '>':
        out.append("&gt;");
        break;
      case '"':
        out.append("&quot;");
        break;
      case '\'':
        out.append("&#39;");
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// Microseconds as milliseconds with three significant digits ("0.412", "12.3", "1530").
std::string Millis(double micros) {
  if (micros < 0) return "&ndash;";
  const double ms = micros / 1000;
  if (ms >= 100) return absl::StrFormat("%.0f", ms);
  if (ms >= 10) return absl::StrFormat("%.1f", ms);
  if (ms >= 1) return absl::StrFormat("%.2f", ms);
  return absl::StrFormat("%.3f", ms);
}

std::string Duration(int64_t seconds) {
  if (seconds < 60) return absl::StrCat(seconds, " s");
  if (seconds < 3600) return absl::StrCat(seconds / 60, " min ", seconds % 60, " s");
  if (seconds < 86400) return absl::StrCat(seconds / 3600, " h ", seconds % 3600 / 60, " min");
  return absl::StrCat(seconds / 86400, " d ", seconds % 86400 / 3600, " h");
}

std::string UtcTime(std::chrono::system_clock::time_point time) {
  const std::time_t t = std::chrono::system_clock::to_time_t(time);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buffer;
}

const char* StateClass(ModelVersionStatus::State state) {
  switch (state) {
    case ModelVersionStatus::AVAILABLE:
      return "ok";
    case ModelVersionStatus::END:
      return "off";
    default:
      return "busy";
  }
}

constexpr char kStyle[] = R"css(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1c2230;background:#f4f5f7}
header{background:#1f2a44;color:#fff;padding:14px 24px;display:flex;flex-wrap:wrap;gap:8px 28px;align-items:baseline}
header h1{font-size:20px;margin:0 12px 0 0}
header span{opacity:.85}
main{padding:8px 24px 32px;max-width:1280px}
h2{font-size:16px;margin:22px 0 8px}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px rgba(0,0,0,.08);min-width:420px}
th,td{padding:5px 12px;text-align:left;border-bottom:1px solid #e3e6eb;vertical-align:top}
th{background:#eef0f4;font-weight:600}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:1px 8px;border-radius:9px;font-size:12px;font-weight:600}
.ok{background:#d9f2e1;color:#17602f}.busy{background:#fff1cc;color:#7a5700}
.off{background:#e6e8ec;color:#4a5160}.bad{background:#fde0df;color:#9b1c1a}
.err{color:#9b1c1a;white-space:pre-wrap}
.muted{color:#5d6474}
details{background:#fff;margin:6px 0;padding:6px 12px;box-shadow:0 1px 2px rgba(0,0,0,.08)}
summary{cursor:pointer;font-weight:600}
pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;white-space:pre-wrap;margin:8px 0}
tr.changed td{font-weight:600}
)css";

// Replaces the live part with the one of a fresh copy of the page; the rest (flags, the
// optimization logs) stays as it is, with its <details> open or closed.
constexpr char kScript[] = R"js(
(function(){var s=document.body.dataset.refresh*1000;setInterval(function(){
fetch('/status',{cache:'no-store'}).then(function(r){return r.text()}).then(function(t){
var d=new DOMParser().parseFromString(t,'text/html');var n=d.getElementById('live');
if(n)document.getElementById('live').replaceWith(n);}).catch(function(){});},s);})();
)js";

}  // namespace

double HistogramQuantile(const std::vector<double>& bounds, const std::vector<uint64_t>& counts,
                         double q) {
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  if (total == 0) return -1;
  const double rank = q * static_cast<double>(total);
  uint64_t below = 0;
  for (size_t b = 0; b < counts.size(); ++b) {
    if (counts[b] > 0 && static_cast<double>(below + counts[b]) >= rank) {
      if (b >= bounds.size()) return bounds.empty() ? -1 : bounds.back();
      const double lower = b == 0 ? 0 : bounds[b - 1];
      const double fraction = (rank - static_cast<double>(below)) / counts[b];
      return lower + (bounds[b] - lower) * fraction;
    }
    below += counts[b];
  }
  return bounds.empty() ? -1 : bounds.back();
}

StatusPage::StatusPage(const ServerCore* core, const ServingMetrics* metrics,
                       StatusPageOptions options, const std::atomic<bool>* draining)
    : core_(core),
      metrics_(metrics),
      options_(std::move(options)),
      draining_(draining),
      start_(Clock::now()),
      start_wall_(std::chrono::system_clock::now()) {}

bool StatusPage::Serves(const HttpRequest& request) {
  if (request.method != "GET" && request.method != "HEAD") return false;
  absl::string_view path = request.target;
  path = path.substr(0, path.find('?'));
  return path == "/" || path == "/status" || path == "/status/";
}

HttpResponse StatusPage::Handle(const HttpRequest& request) const {
  HttpResponse response;
  response.content_type = "text/html; charset=utf-8";
  if (request.method != "HEAD") response.body = Render();
  return response;
}

std::string StatusPage::Render() const {
  Sample now{Clock::now(), {}};
  for (auto& series : metrics_->signature_request_latency.Snapshot()) {
    now.buckets[series.label_values] = std::move(series.bucket_counts);
  }
  std::string live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!samples_.empty() && now.time - samples_.front().time > std::chrono::seconds(30)) {
      samples_.pop_front();
    }
    // The window: back to the newest sample at least 10 s old (steady figures), else to the
    // oldest at least 1 s old (a page just opened).
    const Sample* before = nullptr;
    const Sample* ten_seconds = nullptr;
    for (const Sample& sample : samples_) {
      const auto age = now.time - sample.time;
      if (age >= std::chrono::seconds(10)) ten_seconds = &sample;
      if (age >= std::chrono::seconds(1) && before == nullptr) before = &sample;
    }
    if (ten_seconds != nullptr) before = ten_seconds;
    live = RenderLive(now, before);
    // At most one sample a second, however many browsers have the page open.
    if (samples_.empty() || now.time - samples_.back().time >= std::chrono::seconds(1)) {
      samples_.push_back(std::move(now));
    }
  }
  std::string page = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
      "<title>kiln serve status</title><noscript><meta http-equiv=\"refresh\" content=\"",
      options_.refresh_seconds, "\"></noscript><style>", kStyle,
      "</style></head>\n<body data-refresh=\"", options_.refresh_seconds,
      "\">\n<header><h1>kiln serve</h1><span>", Escape(options_.version), "</span><span>started ",
      UtcTime(start_wall_), "</span></header>\n<main>\n");
  absl::StrAppend(&page, live, RenderDetails(), RenderFlags(), "</main>\n<script>", kScript,
                  "</script>\n</body></html>\n");
  return page;
}

std::string StatusPage::RenderLive(const Sample& now, const Sample* before) const {
  const bool draining = draining_ != nullptr && draining_->load();
  const int64_t uptime =
      std::chrono::duration_cast<std::chrono::seconds>(now.time - start_).count();
  std::string out = absl::StrCat(
      "<div id=\"live\">\n<p>", "<span class=\"badge ", draining ? "busy" : "ok", "\">",
      draining ? "draining (SIGTERM received: not ready, finishing requests in flight)" : "serving",
      "</span> <span class=\"muted\">up ", Duration(uptime), " &middot; page rendered ",
      UtcTime(std::chrono::system_clock::now()), "</span></p>\n");

  // Models and versions.
  absl::StrAppend(&out,
                  "<h2>Models</h2>\n<table id=\"models\"><tr><th>model</th><th>version</th>"
                  "<th>state</th><th>status</th></tr>\n");
  const std::vector<std::string> names = core_->ModelNames();
  for (const std::string& name : names) {
    auto versions = core_->GetStatus(name, std::nullopt);
    if (!versions.ok() || versions->empty()) {
      absl::StrAppend(&out, "<tr><td>", Escape(name),
                      "</td><td>&ndash;</td><td><span class=\"badge off\">no version</span></td>"
                      "<td class=\"err\">",
                      versions.ok() ? "" : Escape(versions.status().message()), "</td></tr>\n");
      continue;
    }
    for (const VersionStatus& v : *versions) {
      const bool failed = !v.status.ok();
      absl::StrAppend(&out, "<tr><td>", Escape(name), "</td><td class=\"n\">", v.version,
                      "</td><td><span class=\"badge ", failed ? "bad" : StateClass(v.state), "\">",
                      ModelVersionStatus::State_Name(v.state), "</span></td><td",
                      failed ? " class=\"err\">" : ">", failed ? Escape(v.status.ToString()) : "OK",
                      "</td></tr>\n");
    }
  }
  absl::StrAppend(&out, "</table>\n");

  // Requests per model version and signature: count, rate and latencies from the
  // per-signature latency histograms; then counts by status (TF Serving's counter, which also
  // counts requests that failed before a version and signature resolved).
  const double window_s =
      before == nullptr ? 0 : std::chrono::duration<double>(now.time - before->time).count();
  absl::StrAppend(&out,
                  "<h2>Requests</h2>\n<table id=\"requests\"><tr><th>model</th><th>version</th>"
                  "<th>signature</th><th>API</th><th>entrypoint</th><th>requests</th><th>req/s</th>"
                  "<th>p50 ms</th><th>p90 ms</th><th>p99 ms</th></tr>\n");
  const std::vector<double>& bounds = metrics_->signature_request_latency.buckets();
  bool any = false;
  for (const auto& [labels, counts] : now.buckets) {
    any = true;
    uint64_t total = 0;
    for (uint64_t c : counts) total += c;
    // Over the window when there is one (the differences of the counters), else since start.
    std::vector<uint64_t> window = counts;
    double seconds = std::max(1e-9, std::chrono::duration<double>(now.time - start_).count());
    if (before != nullptr) {
      auto it = before->buckets.find(labels);
      if (it != before->buckets.end() && it->second.size() == counts.size()) {
        for (size_t b = 0; b < counts.size(); ++b) window[b] -= it->second[b];
      }
      seconds = window_s;
    }
    uint64_t in_window = 0;
    for (uint64_t c : window) in_window += c;
    absl::StrAppend(&out, "<tr>");
    // model_name, version (a number, right-aligned), signature, API, entrypoint.
    for (size_t i = 0; i < 5; ++i) {
      absl::StrAppend(&out, i == 1 ? "<td class=\"n\">" : "<td>",
                      Escape(i < labels.size() ? labels[i] : ""), "</td>");
    }
    absl::StrAppend(&out, "<td class=\"n\">", total, "</td><td class=\"n\">",
                    absl::StrFormat("%.1f", in_window / seconds), "</td>");
    for (double q : {0.5, 0.9, 0.99}) {
      absl::StrAppend(&out, "<td class=\"n\">", Millis(HistogramQuantile(bounds, window, q)),
                      "</td>");
    }
    absl::StrAppend(&out, "</tr>\n");
  }
  if (!any)
    absl::StrAppend(&out, "<tr><td colspan=\"10\" class=\"muted\">no requests yet</td></tr>\n");
  absl::StrAppend(
      &out, "</table>\n<p class=\"muted\">",
      before == nullptr ? std::string("Rates and percentiles since start; later renders show the "
                                      "last seconds.")
                        : absl::StrFormat("Rates and percentiles over the last %.0f s.", window_s),
      " Counters: <code>:kiln:serving:signature_request_latency</code> and "
      "<code>:tensorflow:serving:request_count</code>, as Prometheus scrapes them.</p>\n");

  absl::StrAppend(
      &out, "<table id=\"statuses\"><tr><th>model</th><th>status</th><th>requests</th></tr>\n");
  auto counts = metrics_->request_count.Snapshot();
  for (const auto& series : counts) {
    const std::string& status = series.label_values.size() > 1 ? series.label_values[1] : "";
    absl::StrAppend(
        &out, "<tr><td>", Escape(series.label_values.empty() ? "" : series.label_values[0]),
        "</td><td><span class=\"badge ", status == "OK" ? "ok" : "bad", "\">", Escape(status),
        "</span></td><td class=\"n\">", absl::StrFormat("%.0f", series.value), "</td></tr>\n");
  }
  if (counts.empty())
    absl::StrAppend(&out, "<tr><td colspan=\"3\" class=\"muted\">no requests yet</td></tr>\n");
  absl::StrAppend(&out, "</table>\n");

  // Batch queues.
  absl::StrAppend(&out, "<h2>Batching</h2>\n");
  if (!options_.batching) {
    absl::StrAppend(&out, "<p class=\"muted\">off (--enable_batching=false)</p>\n");
  } else {
    absl::StrAppend(&out,
                    "<table id=\"batching\"><tr><th>model</th><th>version</th><th>signature</th>"
                    "<th>API</th><th>queued batches</th><th>queued requests</th>"
                    "<th>queued rows</th></tr>\n");
    bool any_queue = false;
    for (const std::string& name : names) {
      auto versions = core_->GetStatus(name, std::nullopt);
      if (!versions.ok()) continue;
      for (const VersionStatus& v : *versions) {
        if (v.state != ModelVersionStatus::AVAILABLE) continue;
        auto servable = core_->Lookup(ModelSpecRef{name, v.version, ""});
        if (!servable.ok()) continue;
        for (const auto& queue : (*servable)->BatchQueues()) {
          any_queue = true;
          absl::StrAppend(&out, "<tr><td>", Escape(name), "</td><td class=\"n\">", v.version,
                          "</td><td>", Escape(queue.signature), "</td><td>", Escape(queue.api),
                          "</td><td class=\"n\">", queue.depth.batches, "</td><td class=\"n\">",
                          queue.depth.requests, "</td><td class=\"n\">", queue.depth.rows,
                          "</td></tr>\n");
        }
      }
    }
    if (!any_queue) {
      absl::StrAppend(&out,
                      "<tr><td colspan=\"7\" class=\"muted\">no batch queue opened yet (one "
                      "opens at a signature's first request)</td></tr>\n");
    }
    absl::StrAppend(&out, "</table>\n");
  }
  absl::StrAppend(&out, "</div>\n");
  return out;
}

std::string StatusPage::RenderDetails() const {
  std::string out = absl::StrCat(
      "<h2>Loaded versions</h2>\n<p class=\"muted\">Signatures, op histogram, optimization log and "
      "planned memory, as <code>kiln inspect</code> prints them. Compression (int8/bf16 passes): ",
      options_.allow_compression
          ? "allowed (--allow_compression); what those passes changed is in each log."
          : "off (--allow_compression=false).",
      "</p>\n");
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::string> kept;
  for (const std::string& name : core_->ModelNames()) {
    auto versions = core_->GetStatus(name, std::nullopt);
    if (!versions.ok()) continue;
    for (const VersionStatus& v : *versions) {
      if (v.state != ModelVersionStatus::AVAILABLE) continue;
      auto servable = core_->Lookup(ModelSpecRef{name, v.version, ""});
      if (!servable.ok()) continue;
      const runtime::Model& model = (*servable)->model();
      const std::string key = absl::StrCat(name, "/", v.version, "/", model.path());
      auto cached = inspect_cache_.find(key);
      std::string text = cached != inspect_cache_.end() ? cached->second : model.Inspect();
      absl::StrAppend(&out, "<details><summary>", Escape(name), " version ", v.version,
                      " <span class=\"muted\">(", Escape(model.platform()), ", ",
                      Escape(model.path()), ")</span></summary><pre>", Escape(text),
                      "</pre></details>\n");
      kept[key] = std::move(text);
    }
  }
  inspect_cache_ = std::move(kept);
  return out;
}

std::string StatusPage::RenderFlags() const {
  std::string out =
      "<h2>Flags</h2>\n<p class=\"muted\">Bold: differs from the default.</p>\n"
      "<table id=\"flags\"><tr><th>flag</th><th>value</th></tr>\n";
  for (const ServeFlagValue& flag : options_.flags) {
    absl::StrAppend(&out, flag.changed ? "<tr class=\"changed\">" : "<tr>", "<td>--",
                    Escape(flag.name), "</td><td>", Escape(flag.value), "</td></tr>\n");
  }
  absl::StrAppend(&out, "</table>\n");
  return out;
}

}  // namespace kiln::serving
