// Runs `kiln serve` as a child process on free loopback ports and talks to it over HTTP and
// gRPC. Every wait is bounded; the destructor kills a server that is still running.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "tensorflow_serving/apis/model_service.grpc.pb.h"
#include "tensorflow_serving/apis/prediction_service.grpc.pb.h"

namespace kiln::serving::testing {

// A port that was free a moment ago (bind to port 0, read it, close).
int FreePort();

struct HttpReply {
  int status = 0;  // 0: no connection
  std::string body;
  std::string content_type;
  std::string content_encoding;
  std::vector<std::pair<std::string, std::string>> headers;  // every response header
};
HttpReply HttpCall(int port, const std::string& method, const std::string& target,
                   const std::string& body = "",
                   const std::vector<std::pair<std::string, std::string>>& headers = {});

class ServerProcess {
 public:
  // Starts `kiln serve <args>` with --port and --rest_api_port chosen here (rest_port 0: no
  // REST flag is passed).
  ServerProcess(std::vector<std::string> args, bool with_rest = true);
  ~ServerProcess();

  // Waits until the REST port (or the gRPC port without REST) accepts and answers; false
  // when the process exited or `timeout_s` passed.
  bool WaitUntilServing(double timeout_s = 60);
  // SIGTERM, then waits for the exit code (-1 on timeout, after which it is killed).
  // Tests close their gRPC stubs first anyway, so that a slow shutdown shows in their times.
  int Terminate(double timeout_s = 20);
  // Sends `signal_number` without waiting (see WaitForExit).
  void Signal(int signal_number);
  // Waits for the process to exit by itself; -1 on timeout.
  int WaitForExit(double timeout_s = 20);
  std::string Log() const;  // stderr and stdout so far

  pid_t pid() const { return pid_; }  // -1 once it has exited
  int grpc_port() const { return grpc_port_; }
  int rest_port() const { return rest_port_; }
  std::unique_ptr<tensorflow::serving::PredictionService::Stub> PredictionStub() const;
  std::unique_ptr<tensorflow::serving::ModelService::Stub> ModelStub() const;

 private:
  pid_t pid_ = -1;
  int grpc_port_ = 0;
  int rest_port_ = 0;
  std::string log_path_;
};

// Runs `kiln <args>` to completion; returns the exit code and fills `output`.
int RunKiln(const std::vector<std::string>& args, std::string* output, double timeout_s = 30);

// A fresh empty directory under the test's temp dir.
std::string MakeTempDir(const std::string& name);

}  // namespace kiln::serving::testing
