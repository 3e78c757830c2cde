#include "kiln/serving/server.h"

#include <grpc/grpc.h>
#include <grpc/support/alloc.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <signal.h>
#include <simdjson.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <variant>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kiln/serving/deadline.h"
#include "kiln/serving/grpc_service.h"
#include "kiln/serving/health_service.h"
#include "kiln/serving/http_server.h"
#include "kiln/serving/kserve_grpc.h"
#include "kiln/serving/request_logger.h"
#include "kiln/serving/rest_handler.h"
#include "kiln/serving/server_core.h"
#include "kiln/serving/status_page.h"
#include "kiln/serving/tls.h"
#include "serving/text_proto.h"
#include "tensorflow_serving/config/monitoring_config.pb.h"

namespace kiln::serving {

namespace {

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// Reads a channelz JSON page (int64 fields are strings in proto3 JSON, absent when 0).
int64_t ChannelzInt(simdjson::dom::element object, const char* key) {
  std::string_view text;
  int64_t value = 0;
  if (object[key].get_string().get(text) == simdjson::SUCCESS) {
    absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &value);
  }
  return value;
}

// Whether a channelz listing has no further page ("end" is omitted when false).
bool ChannelzEnd(simdjson::dom::element listing) {
  bool end = false;
  return listing["end"].get_bool().get(end) == simdjson::SUCCESS && end;
}

// The HTTP/2 streams open on every gRPC server of this process, from channelz's per-connection
// counters: a stream opens with the request's HEADERS frame, so a call whose large message is
// still uploading counts, while the C++ server sees a unary call only once its whole message
// has arrived. -1 when channelz cannot tell.
int64_t OpenGrpcStreams() {
  simdjson::dom::parser parser;
  auto page = [&](char* json, simdjson::dom::element* root) {
    if (json == nullptr) return false;
    const std::string text(json);
    gpr_free(json);
    return parser.parse(text).get(*root) == simdjson::SUCCESS;
  };
  int64_t open = 0;
  int64_t next_server = 0;
  for (bool servers_end = false; !servers_end;) {
    simdjson::dom::element servers;
    if (!page(grpc_channelz_get_servers(next_server), &servers)) return -1;
    servers_end = ChannelzEnd(servers);
    simdjson::dom::array server_list;
    if (servers["server"].get_array().get(server_list) != simdjson::SUCCESS) break;
    std::vector<int64_t> server_ids;
    for (simdjson::dom::element server : server_list) {
      server_ids.push_back(ChannelzInt(server["ref"], "serverId"));
    }
    for (int64_t server_id : server_ids) {
      next_server = std::max(next_server, server_id + 1);
      int64_t next_socket = 0;
      for (bool sockets_end = false; !sockets_end;) {
        simdjson::dom::element sockets;
        if (!page(grpc_channelz_get_server_sockets(server_id, next_socket, 0), &sockets)) {
          return -1;
        }
        sockets_end = ChannelzEnd(sockets);
        simdjson::dom::array refs;
        if (sockets["socketRef"].get_array().get(refs) != simdjson::SUCCESS) break;
        std::vector<int64_t> socket_ids;
        for (simdjson::dom::element ref : refs) socket_ids.push_back(ChannelzInt(ref, "socketId"));
        for (int64_t socket_id : socket_ids) {
          next_socket = std::max(next_socket, socket_id + 1);
          simdjson::dom::element socket;
          // A connection that closed since the listing has no page: nothing open on it.
          if (!page(grpc_channelz_get_socket(socket_id), &socket)) continue;
          simdjson::dom::element data;
          if (socket["socket"]["data"].get(data) != simdjson::SUCCESS) continue;
          open += ChannelzInt(data, "streamsStarted") - ChannelzInt(data, "streamsSucceeded") -
                  ChannelzInt(data, "streamsFailed");
        }
      }
    }
  }
  return open;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "kiln serve: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace

int RunServer(const ServeFlags& flags) {
  // Signals are taken by sigwait() below; every thread started from here inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // Held for the life of the process, never released: the last grpc_shutdown() (at exit, once
  // the server is gone) blocks until gRPC's poller threads time out of epoll_wait, which kept
  // the process seconds after its last request was answered. The process exits right after
  // RunServer; the kernel takes back what gRPC still holds.
  grpc_init();

  if (flags.model_config_file.empty() && flags.model_base_path.empty()) {
    return Fail(absl::InvalidArgumentError(
        "Both --model_base_path and --model_config_file are empty: name the models to serve"));
  }
  if (!flags.grpc_socket_path.empty()) {
    std::fprintf(stderr, "kiln serve: note: --grpc_socket_path is served as unix:%s\n",
                 flags.grpc_socket_path.c_str());
  }
  tensorflow::serving::ModelServerConfig config;
  if (!flags.model_config_file.empty()) {
    auto parsed = ReadModelServerConfig(flags.model_config_file);
    if (!parsed.ok()) return Fail(parsed.status());
    config = *parsed;
  } else {
    config = SingleModelConfig(flags.model_name, flags.model_base_path);
  }

  // Checked before any model loads: a bad key or certificate stops the server at once.
  std::optional<tensorflow::serving::SSLConfig> ssl_config;
  if (!flags.ssl_config_file.empty()) {
    auto parsed = ReadSslConfig(flags.ssl_config_file);
    if (!parsed.ok()) return Fail(parsed.status());
    ssl_config = *std::move(parsed);
  } else if (flags.rest_api_ssl) {
    return Fail(absl::InvalidArgumentError(
        "--rest_api_ssl needs --ssl_config_file (the key and certificate to serve)"));
  }

  ServingMetrics metrics;
  ServerCoreOptions options;
  options.metrics = &metrics;
  options.model_options.tags = flags.saved_model_tags;
  options.model_options.disable_optimizer = flags.disable_optimizer;
  options.model_options.allow_compression = flags.allow_compression;
  options.model_options.run_memory_budget_bytes =
      static_cast<size_t>(flags.run_memory_budget_bytes);  // checked >= 0 by the parser
  // As TF Serving: the intra/inter-op flags when either is given, else
  // --tensorflow_session_parallelism for both (0: auto).
  const bool split_parallelism =
      flags.tensorflow_intra_op_parallelism > 0 || flags.tensorflow_inter_op_parallelism > 0;
  options.model_options.intra_op_threads =
      static_cast<int>(split_parallelism ? flags.tensorflow_intra_op_parallelism
                                         : flags.tensorflow_session_parallelism);
  options.model_options.inter_op_threads =
      static_cast<int>(split_parallelism ? flags.tensorflow_inter_op_parallelism
                                         : flags.tensorflow_session_parallelism);
  options.model_options.mixed_precision_bf16 = flags.mixed_precision == "bfloat16";
  options.enable_model_warmup = flags.enable_model_warmup;
  // TF Serving replays each warmup record once unless this is > 0.
  options.num_warmup_iterations = std::max(1, flags.num_request_iterations_for_warmup);
  options.file_system_poll_wait_seconds = flags.file_system_poll_wait_seconds;
  // XLA's JIT is TensorFlow's way to compile ahead of the first request; Kiln's is plan
  // precompilation.
  options.allow_precompilation = flags.allow_precompilation || flags.xla_cpu_compilation_enabled ||
                                 flags.xla_gpu_compilation_enabled;
  options.allow_version_labels_for_unavailable_models =
      flags.allow_version_labels_for_unavailable_models;
  options.enable_signature_method_name_check = flags.enable_signature_method_name_check;
  options.enable_serialization_as_tensor_content = flags.enable_serialization_as_tensor_content;
  options.enable_per_model_batching_parameters = flags.enable_per_model_batching_parameters;
  options.max_num_load_retries = flags.max_num_load_retries;
  options.load_retry_interval_micros = flags.load_retry_interval_micros;
  options.num_load_threads = flags.num_load_threads;
  options.num_unload_threads = flags.num_unload_threads;
  options.flush_filesystem_caches = flags.flush_filesystem_caches;
  options.log_loaded_models = true;
  if (flags.enable_batching) {
    tensorflow::serving::BatchingParameters params;
    if (!flags.batching_parameters_file.empty()) {
      auto parsed = ReadTextProto<tensorflow::serving::BatchingParameters>(
          flags.batching_parameters_file, "batching_parameters_file");
      if (!parsed.ok()) return Fail(parsed.status());
      params = *parsed;
    }
    auto batching = BatchingOptionsFromProto(params);
    if (!batching.ok()) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--batching_parameters_file: ", batching.status().message())));
    }
    options.batching = *batching;
  }
  std::string metrics_path;
  if (!flags.monitoring_config_file.empty()) {
    auto monitoring = ReadTextProto<tensorflow::serving::MonitoringConfig>(
        flags.monitoring_config_file, "monitoring_config_file");
    if (!monitoring.ok()) return Fail(monitoring.status());
    if (monitoring->prometheus_config().enable()) {
      metrics_path = monitoring->prometheus_config().path().empty()
                         ? "/monitoring/prometheus/metrics"
                         : monitoring->prometheus_config().path();
    }
  }

  // logging_config: checked before the models load, like the other config errors.
  RequestLogOptions log_options;
  log_options.max_file_bytes = flags.request_log_max_file_bytes;
  log_options.saved_model_tags = absl::StrSplit(flags.saved_model_tags, ',', absl::SkipEmpty());
  RequestLoggers request_loggers(log_options, &metrics);
  if (absl::Status logging = request_loggers.Configure(config); !logging.ok()) {
    return Fail(logging);
  }

  // Until the models are loaded, SIGTERM/SIGINT end the process at once, as they end TF
  // Serving's: a load being retried (up to --max_num_load_retries times,
  // --load_retry_interval_micros apart) must not hold up a stop.
  std::atomic<bool> loaded{false};
  std::thread startup_watch([&] {
    const timespec tick{0, 50 * 1000 * 1000};
    while (!loaded.load()) {
      const int signal_number = sigtimedwait(&signals, nullptr, &tick);
      if (signal_number > 0) {
        std::fprintf(stderr, "kiln serve: received signal %d while loading models; exiting\n",
                     signal_number);
        std::fflush(stderr);
        std::_Exit(128 + signal_number);
      }
    }
  });
  auto core_or = ServerCore::Create(options, config);
  loaded = true;
  startup_watch.join();
  if (!core_or.ok()) return Fail(core_or.status());
  std::unique_ptr<ServerCore> core = std::move(*core_or);

  // Set at SIGTERM/SIGINT: from then on readiness is false (see kShutdownGraceSeconds).
  std::atomic<bool> draining{false};
  RpcCounter rpc_counter;
  PredictionServiceImpl prediction_service(core.get(), &metrics, &rpc_counter);
  prediction_service.set_request_loggers(&request_loggers);
  ModelServiceImpl model_service(core.get(), &rpc_counter);
  model_service.set_request_loggers(&request_loggers);
  KServeGrpcService kserve_service(core.get(), &metrics, &rpc_counter, &draining);
  std::unique_ptr<HealthServiceImpl> health_service;
  if (flags.enable_grpc_healthcheck_service) {
    health_service = std::make_unique<HealthServiceImpl>(
        core.get(), &draining,
        std::set<std::string>{"tensorflow.serving.PredictionService",
                              "tensorflow.serving.ModelService", "inference.GRPCInferenceService",
                              "grpc.health.v1.Health"});
  }
  grpc::ServerBuilder builder;
  int grpc_port = 0;
  // As TF Serving: --ssl_config_file secures both the port and --grpc_socket_path.
  const std::shared_ptr<grpc::ServerCredentials> credentials =
      ssl_config.has_value() ? GrpcServerCredentials(*ssl_config)
                             : grpc::InsecureServerCredentials();
  builder.AddListeningPort(absl::StrCat(flags.grpc_address, ":", flags.port), credentials,
                           &grpc_port);
  if (!flags.grpc_socket_path.empty()) {
    builder.AddListeningPort(absl::StrCat("unix:", flags.grpc_socket_path), credentials);
  }
  builder.RegisterService(&prediction_service);
  builder.RegisterService(&model_service);
  builder.RegisterService(&kserve_service);
  if (health_service != nullptr) builder.RegisterService(health_service.get());
  // Shutdown reads channelz's per-connection stream counts (OpenGrpcStreams); on by default,
  // set so that it stays on.
  builder.AddChannelArgument(GRPC_ARG_ENABLE_CHANNELZ, 1);
  builder.SetMaxReceiveMessageSize(std::numeric_limits<int>::max());
  builder.SetMaxSendMessageSize(std::numeric_limits<int>::max());
  if (flags.grpc_max_threads > 0) {
    grpc::ResourceQuota quota("kiln_serve");
    quota.SetMaxThreads(flags.grpc_max_threads);
    builder.SetResourceQuota(quota);
  }
  for (absl::string_view argument :
       absl::StrSplit(flags.grpc_channel_arguments, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(argument, absl::MaxSplits('=', 1));
    int numeric;
    if (absl::SimpleAtoi(kv.second, &numeric)) {
      builder.AddChannelArgument(kv.first, numeric);
    } else {
      builder.AddChannelArgument(kv.first, kv.second);
    }
  }
  std::unique_ptr<grpc::Server> grpc_server = builder.BuildAndStart();
  if (grpc_server == nullptr || grpc_port == 0) {
    return Fail(absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", flags.grpc_address, ":", flags.port)));
  }
  std::fprintf(stderr, "Running gRPC ModelServer at %s:%d%s ...\n", flags.grpc_address.c_str(),
               grpc_port, ssl_config.has_value() ? " (TLS)" : "");

  RestHandler rest_handler(core.get(), &metrics, metrics_path, flags.rest_api_enable_cors_support,
                           flags.explain_max_evaluations);
  rest_handler.set_request_loggers(&request_loggers);
  StatusPageOptions page_options;
  page_options.version = kServerVersion;
  page_options.flags = ServeFlagValues(flags);
  page_options.allow_compression = flags.allow_compression;
  page_options.batching = flags.enable_batching;
  StatusPage status_page(core.get(), &metrics, std::move(page_options), &draining);
  std::unique_ptr<HttpServer> http_server;
  if (flags.rest_api_port > 0) {
    HttpServerOptions http_options;
    http_options.address = flags.rest_api_address;
    http_options.port = flags.rest_api_port;
    http_options.num_threads = flags.rest_api_num_threads > 0
                                   ? flags.rest_api_num_threads
                                   : 4 * std::max(1u, std::thread::hardware_concurrency());
    http_options.timeout_ms = flags.rest_api_timeout_in_ms;
    http_options.max_body_bytes = static_cast<size_t>(flags.rest_api_max_body_bytes);
    if (flags.rest_api_ssl) {  // checked above: ssl_config is set
      http_options.tls =
          HttpServerOptions::Tls{ssl_config->server_key(), ssl_config->server_cert(),
                                 ssl_config->custom_ca(), ssl_config->client_verify()};
    }
    auto started = HttpServer::Start(http_options, [&](const HttpRequest& request) {
      // --rest_api_timeout_in_ms bounds the request, its time in a batch queue included.
      RequestDeadlineScope deadline(
          RequestDeadlineScope::FromTimeoutMs(flags.rest_api_timeout_in_ms));
      if (StatusPage::Serves(request)) return status_page.Handle(request);
      if (draining.load() && request.method == "GET" &&
          absl::string_view(request.target).substr(0, request.target.find('?')) ==
              "/v2/health/ready") {
        HttpResponse response;
        response.status = 503;
        response.body = "{\"ready\": false}";
        return response;
      }
      return rest_handler.Handle(request);
    });
    if (!started.ok()) {
      grpc_server->Shutdown();
      return Fail(started.status());
    }
    http_server = std::move(*started);
    std::fprintf(stderr, "Exporting HTTP/REST API at:%s:%d%s ...\n", flags.rest_api_address.c_str(),
                 http_server->port(), flags.rest_api_ssl ? " (HTTPS)" : "");
  }

  // --model_config_file_poll_wait_seconds: re-read the config and apply it when it changed.
  std::mutex config_mu;
  std::condition_variable config_cv;
  bool stopping = false;
  std::thread config_thread;
  if (!flags.model_config_file.empty() && flags.model_config_file_poll_wait_seconds > 0) {
    config_thread = std::thread([&] {
      std::string last = ReadFileOrEmpty(flags.model_config_file);
      std::unique_lock<std::mutex> lock(config_mu);
      while (!config_cv.wait_for(lock,
                                 std::chrono::seconds(flags.model_config_file_poll_wait_seconds),
                                 [&] { return stopping; })) {
        const std::string text = ReadFileOrEmpty(flags.model_config_file);
        if (text == last) continue;
        last = text;
        auto parsed = ReadModelServerConfig(flags.model_config_file);
        absl::Status status = parsed.ok() ? core->ReloadConfig(*parsed) : parsed.status();
        if (status.ok()) status = request_loggers.Configure(*parsed);
        std::fprintf(stderr, "kiln serve: model config reloaded from %s: %s\n",
                     flags.model_config_file.c_str(), status.ToString().c_str());
      }
    });
  }
  std::fflush(stderr);

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  // Readiness turns false before anything stops, so that a probe answered from here on sends
  // no more traffic here while requests in flight finish.
  draining = true;
  // Health watchers get NOT_SERVING now and their streams end, so that shutdown does not wait
  // for them.
  if (health_service != nullptr) health_service->Shutdown();
  std::fprintf(stderr, "kiln serve: received signal %d, draining (up to %d s)\n", signal_number,
               kShutdownGraceSeconds);
  std::fflush(stderr);
  {
    std::lock_guard<std::mutex> lock(config_mu);
    stopping = true;
  }
  config_cv.notify_all();
  if (config_thread.joinable()) config_thread.join();
  // Both front ends stop accepting at once, then let what is in flight finish.
  const auto grace = std::chrono::system_clock::now() + std::chrono::seconds(kShutdownGraceSeconds);
  std::atomic<bool> grpc_stopping{false}, grpc_stopped{false};
  std::thread grpc_stopper([&] {
    // gRPC's Shutdown cancels every unary call whose request message has not fully arrived yet
    // (core has no handler left to give it to), so first let the uploads in flight finish:
    // until every open stream has its handler running. Readiness is already false; for this
    // while (the uploads' time, at most half the grace) the port still accepts connections.
    const auto uploads_deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(kShutdownGraceSeconds) / 2;
    while (std::chrono::steady_clock::now() < uploads_deadline) {
      const int64_t open = OpenGrpcStreams();
      if (open < 0 || open <= rpc_counter.active()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    grpc_stopping = true;
    grpc_server->Shutdown(grace);
    grpc_stopped = true;
  });
  // gRPC's shutdown also waits for every client connection to go away after its GOAWAY, and
  // an idle client channel only notices that at its next poll (5 s by default). Once no RPC
  // has been running for a moment, drop those connections: nothing is in flight on them.
  std::thread idle_closer([&] {
    auto quiet_since = std::chrono::steady_clock::now();
    while (!grpc_stopped.load() && std::chrono::system_clock::now() < grace) {
      const auto now = std::chrono::steady_clock::now();
      // Cancelling is only meant for a server already shutting down (no new calls).
      // A stream still open (a request still uploading) keeps its connection too; when
      // channelz cannot tell (-1), the handlers alone decide, as before.
      if (rpc_counter.active() > 0 || !grpc_stopping.load() || OpenGrpcStreams() > 0) {
        quiet_since = now;
      } else if (now - quiet_since >= std::chrono::milliseconds(200)) {
        grpc_server_cancel_all_calls(grpc_server->c_server());
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  if (http_server != nullptr) http_server->Shutdown(kShutdownGraceSeconds * 1000);
  grpc_stopper.join();
  idle_closer.join();
  core->Stop();
  std::fprintf(stderr, "kiln serve: stopped\n");
  return 0;
}

}  // namespace kiln::serving
