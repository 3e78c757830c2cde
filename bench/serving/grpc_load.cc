// gRPC load generator for `kiln serve` (or TF Serving): N client threads, each with its own
// channel (its own TCP connection), send PredictRequests as fast as their replies come back,
// and print throughput and latency percentiles over a measured window.
//   serving_grpc_load --target=127.0.0.1:8500 --model=half_plus_two --input=x --shape=1
//                     --rows=3 --connections=16 --seconds=10 [--warmup_seconds=2]
// --shape is the shape of one row (after the batch dimension); values are float32, sent in
// tensor_content as TF's make_tensor_proto does.
// --sequential=N instead measures one connection's first Predict (after one GetModelStatus
// call on that connection) and the p50 of the N requests after it (the warmup figure: first
// request vs steady state). --after_first=CMD runs CMD (a shell command) right after the first
// Predict, before the others: run_warmup_bench.sh scrapes the server's metrics there, to tell
// the server's share of the first request's time from the client's and the connection's.
// connect_us (TCP + HTTP/2 handshake, WaitForConnected) and status_us (the GetModelStatus call,
// the connection's first RPC) are printed too: they are paid before the timed first Predict.
// --prime_client first sends one Predict for a model the server does not have (NOT_FOUND from
// its model lookup), so that the client process's own first-call costs are paid before the
// timed Predict. --fresh_connections=K then opens K more connections from the warm client
// process and prints the medians of their first and second Predicts.
// Output: key=value pairs; exit code 1 when any request failed.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tensorflow_serving/apis/model_service.grpc.pb.h"
#include "tensorflow_serving/apis/prediction_service.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(p * (values.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  std::string target = "127.0.0.1:8500", model = "half_plus_two", input = "x", signature;
  std::string after_first;
  std::vector<int64_t> row_shape = {1};
  int connections = 1, rows = 3, sequential = 0;
  bool prime_client = false;
  int fresh_connections = 0;
  double seconds = 10, warmup_seconds = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      const std::string prefix = std::string("--") + name + "=";
      return arg.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (auto v = value("target"))
      target = v;
    else if (auto v = value("model"))
      model = v;
    else if (auto v = value("input"))
      input = v;
    else if (auto v = value("signature"))
      signature = v;
    else if (auto v = value("connections"))
      connections = std::atoi(v);
    else if (auto v = value("rows"))
      rows = std::atoi(v);
    else if (auto v = value("seconds"))
      seconds = std::atof(v);
    else if (auto v = value("warmup_seconds"))
      warmup_seconds = std::atof(v);
    else if (auto v = value("after_first"))
      after_first = v;
    else if (auto v = value("sequential"))
      sequential = std::atoi(v);
    else if (auto v = value("fresh_connections"))
      fresh_connections = std::atoi(v);
    else if (arg == "--prime_client")
      prime_client = true;
    else if (auto v = value("shape")) {
      row_shape.clear();
      std::stringstream dims(v);
      std::string dim;
      while (std::getline(dims, dim, ',')) row_shape.push_back(std::stoll(dim));
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (connections < 1 || rows < 0) {
    std::fprintf(stderr, "--connections must be >= 1 and --rows >= 0\n");
    return 2;
  }
  tensorflow::serving::PredictRequest request;
  request.mutable_model_spec()->set_name(model);
  if (!signature.empty()) request.mutable_model_spec()->set_signature_name(signature);
  auto& x = (*request.mutable_inputs())[input];
  x.set_dtype(tensorflow::DT_FLOAT);
  x.mutable_tensor_shape()->add_dim()->set_size(rows);
  int64_t elements = rows;
  for (int64_t d : row_shape) {
    x.mutable_tensor_shape()->add_dim()->set_size(d);
    elements *= d;
  }
  std::vector<float> values(elements);
  for (int64_t i = 0; i < elements; ++i) values[i] = static_cast<float>(i % 255) / 255.0f;
  x.set_tensor_content(values.data(), values.size() * sizeof(float));

  auto make_stub = [&](int id) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", id);  // a distinct connection per client thread
    args.SetMaxReceiveMessageSize(-1);
    return tensorflow::serving::PredictionService::NewStub(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
  };

  if (sequential > 0) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
    // Connect first, so that the first request's time is the server's, not the handshake's.
    const auto connect_start = Clock::now();
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(30))) {
      std::fprintf(stderr, "cannot connect to %s\n", target.c_str());
      return 1;
    }
    const double connect_us = Micros(Clock::now() - connect_start);
    // One ModelService call first: the connection's first RPC and the client's own first-call
    // code paths cost about a millisecond whatever the model, which is not what warmup is
    // about. The first Predict after it meets the server's predict path cold.
    double status_us = 0;
    {
      auto model_stub = tensorflow::serving::ModelService::NewStub(channel);
      tensorflow::serving::GetModelStatusRequest status_request;
      status_request.mutable_model_spec()->set_name(model);
      tensorflow::serving::GetModelStatusResponse status_response;
      grpc::ClientContext context;
      const auto status_start = Clock::now();
      const grpc::Status status = model_stub->GetModelStatus(&context, status_request,
                                                             &status_response);
      status_us = Micros(Clock::now() - status_start);
      if (!status.ok()) {
        std::fprintf(stderr, "GetModelStatus: %s\n", status.error_message().c_str());
        return 1;
      }
    }
    auto stub = tensorflow::serving::PredictionService::NewStub(channel);
    tensorflow::serving::PredictResponse response;
    double prime_us = 0;
    if (prime_client) {
      // The client process's own first Predict (gRPC's client call path, building, serializing
      // and parsing these messages for the first time) costs a few hundred microseconds on this
      // machine, on any server, warm or not. Pay it here with a Predict for a model the server
      // does not have: the server answers NOT_FOUND from its model lookup, before any decoding,
      // model run or reply encoding, so the timed Predict still meets all of those cold.
      const auto prime_start = Clock::now();
      tensorflow::serving::PredictRequest unknown = request;
      unknown.mutable_model_spec()->set_name(model + "__serving_grpc_load_no_such_model");
      grpc::ClientContext context;
      const grpc::Status status = stub->Predict(&context, unknown, &response);
      if (status.error_code() != grpc::StatusCode::NOT_FOUND) {
        std::fprintf(stderr, "--prime_client: expected NOT_FOUND for an unknown model, got %d %s\n",
                     static_cast<int>(status.error_code()), status.error_message().c_str());
        return 1;
      }
      // Parse a reply as large as the real one once (the unknown model's reply had no outputs).
      tensorflow::serving::PredictResponse reply;
      for (const auto& [key, tensor] : request.inputs()) (*reply.mutable_outputs())[key] = tensor;
      response.ParseFromString(reply.SerializeAsString());
      prime_us = Micros(Clock::now() - prime_start);
    }
    std::vector<double> latencies;
    long errors = 0;
    std::string first_error;
    for (int i = 0; i <= sequential; ++i) {
      grpc::ClientContext context;
      const auto t0 = Clock::now();
      const grpc::Status status = stub->Predict(&context, request, &response);
      latencies.push_back(Micros(Clock::now() - t0));
      if (!status.ok()) {
        if (errors++ == 0) first_error = status.error_message();
      }
      if (i == 0 && !after_first.empty() && std::system(after_first.c_str()) != 0) {
        std::fprintf(stderr, "--after_first command failed: %s\n", after_first.c_str());
        return 1;
      }
    }
    const double first = latencies[0];
    latencies.erase(latencies.begin());
    const double p50 = Percentile(latencies, 0.5);
    std::printf(
        "first_us=%.0f p50_us=%.0f p99_us=%.0f first_over_p50=%.2f requests=%d errors=%ld "
        "connect_us=%.0f status_us=%.0f prime_us=%.0f\n",
        first, p50, Percentile(latencies, 0.99), first / p50, sequential + 1, errors, connect_us,
        status_us, prime_us);
    if (errors > 0) std::fprintf(stderr, "first error: %s\n", first_error.c_str());
    if (fresh_connections > 0) {
      // New connections from this now warm client process, each opened as the first one was
      // (connect, GetModelStatus) and sent two Predicts: their first against their second
      // shows what a connection's first Predict costs once the client process itself is warm.
      std::vector<double> firsts, seconds;
      for (int c = 0; c < fresh_connections; ++c) {
        grpc::ChannelArguments fresh_args;
        fresh_args.SetInt("grpc.channel_id", 1000 + c);  // a new connection, not a shared one
        fresh_args.SetMaxReceiveMessageSize(-1);
        auto fresh = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                               fresh_args);
        if (!fresh->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(30))) {
          std::fprintf(stderr, "cannot connect to %s\n", target.c_str());
          return 1;
        }
        auto model_stub = tensorflow::serving::ModelService::NewStub(fresh);
        tensorflow::serving::GetModelStatusRequest status_request;
        status_request.mutable_model_spec()->set_name(model);
        tensorflow::serving::GetModelStatusResponse status_response;
        grpc::ClientContext status_context;
        if (!model_stub->GetModelStatus(&status_context, status_request, &status_response).ok()) {
          ++errors;
        }
        auto fresh_stub = tensorflow::serving::PredictionService::NewStub(fresh);
        for (int r = 0; r < 2; ++r) {
          grpc::ClientContext context;
          const auto t0 = Clock::now();
          if (!fresh_stub->Predict(&context, request, &response).ok()) ++errors;
          (r == 0 ? firsts : seconds).push_back(Micros(Clock::now() - t0));
        }
      }
      std::printf("fresh_conn_first_us=%.0f fresh_conn_second_us=%.0f fresh_connections=%d\n",
                  Percentile(firsts, 0.5), Percentile(seconds, 0.5), fresh_connections);
    }
    return errors == 0 ? 0 : 1;
  }

  struct Sample {
    Clock::time_point end;
    float micros;
  };
  std::atomic<bool> stop{false};
  std::atomic<long> errors{0};
  std::vector<std::vector<Sample>> samples(connections);
  std::vector<std::string> first_errors(connections);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int c = 0; c < connections; ++c) {
    threads.emplace_back([&, c] {
      auto stub = make_stub(c);
      tensorflow::serving::PredictResponse response;
      while (!stop.load(std::memory_order_relaxed)) {
        grpc::ClientContext context;
        const auto t0 = Clock::now();
        const grpc::Status status = stub->Predict(&context, request, &response);
        const auto t1 = Clock::now();
        if (!status.ok()) {
          errors.fetch_add(1);
          if (first_errors[c].empty()) first_errors[c] = status.error_message();
        }
        samples[c].push_back({t1, static_cast<float>(Micros(t1 - t0))});
      }
    });
  }
  const auto window_start = start + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(warmup_seconds));
  const auto window_end = window_start + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(seconds));
  std::this_thread::sleep_until(window_end);
  stop = true;
  for (auto& t : threads) t.join();
  std::vector<double> latencies;
  for (const auto& per_thread : samples) {
    for (const Sample& s : per_thread) {
      if (s.end >= window_start && s.end <= window_end) latencies.push_back(s.micros);
    }
  }
  const double requests_per_s = latencies.size() / seconds;
  std::printf(
      "requests=%zu errors=%ld rps=%.1f rows_per_s=%.1f p50_us=%.0f p99_us=%.0f "
      "connections=%d rows=%d\n",
      latencies.size(), errors.load(), requests_per_s, requests_per_s * rows,
      Percentile(latencies, 0.5), Percentile(latencies, 0.99), connections, rows);
  for (const auto& e : first_errors) {
    if (!e.empty()) {
      std::fprintf(stderr, "first error: %s\n", e.c_str());
      break;
    }
  }
  return errors.load() == 0 ? 0 : 1;
}
