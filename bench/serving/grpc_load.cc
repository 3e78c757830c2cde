// gRPC load generator for `kiln serve` (or TF Serving): N client threads, each with its own
// channel, send PredictRequests for half_plus_two-style models (input "x", float[rows, 1]) for
// a fixed time and print throughput and latency percentiles.
//   serving_grpc_load --target=127.0.0.1:8500 --model=half_plus_two --connections=16
//                     --seconds=10 --rows=3
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tensorflow_serving/apis/prediction_service.grpc.pb.h"

int main(int argc, char** argv) {
  std::string target = "127.0.0.1:8500", model = "half_plus_two", input = "x";
  int connections = 1, rows = 3;
  double seconds = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      const std::string prefix = std::string("--") + name + "=";
      return arg.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (auto v = value("target")) target = v;
    else if (auto v = value("model")) model = v;
    else if (auto v = value("input")) input = v;
    else if (auto v = value("connections")) connections = std::atoi(v);
    else if (auto v = value("rows")) rows = std::atoi(v);
    else if (auto v = value("seconds")) seconds = std::atof(v);
    else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  tensorflow::serving::PredictRequest request;
  request.mutable_model_spec()->set_name(model);
  auto& x = (*request.mutable_inputs())[input];
  x.set_dtype(tensorflow::DT_FLOAT);
  x.mutable_tensor_shape()->add_dim()->set_size(rows);
  x.mutable_tensor_shape()->add_dim()->set_size(1);
  for (int r = 0; r < rows; ++r) x.add_float_val(static_cast<float>(r));

  std::atomic<bool> stop{false};
  std::atomic<long> errors{0};
  std::vector<std::vector<double>> latencies(connections);
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < connections; ++c) {
    threads.emplace_back([&, c] {
      grpc::ChannelArguments args;
      args.SetInt("grpc.channel_id", c);  // a distinct connection per client thread
      auto stub = tensorflow::serving::PredictionService::NewStub(
          grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
      tensorflow::serving::PredictResponse response;
      while (!stop.load(std::memory_order_relaxed)) {
        grpc::ClientContext context;
        const auto t0 = std::chrono::steady_clock::now();
        const grpc::Status status = stub->Predict(&context, request, &response);
        const auto t1 = std::chrono::steady_clock::now();
        if (!status.ok()) errors.fetch_add(1);
        latencies[c].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) { return all.empty() ? 0.0 : all[size_t(p * (all.size() - 1))]; };
  std::printf("requests=%zu errors=%ld rps=%.0f p50_us=%.0f p99_us=%.0f\n", all.size(),
              errors.load(), all.size() / elapsed, pct(0.5), pct(0.99));
  return errors.load() == 0 ? 0 : 1;
}
