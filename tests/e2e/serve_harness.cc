#include "serve_harness.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace kiln::serving::testing {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

HttpReply HttpCall(int port, const std::string& method, const std::string& target,
                   const std::string& body,
                   const std::vector<std::pair<std::string, std::string>>& headers) {
  HttpReply reply;
  try {
    net::io_context ioc;
    beast::tcp_stream stream(ioc);
    stream.expires_after(std::chrono::seconds(30));
    stream.connect(
        tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
    http::request<http::string_body> request(http::string_to_verb(method), target, 11);
    request.set(http::field::host, "127.0.0.1");
    request.set(http::field::content_type, "application/json");
    for (const auto& [name, value] : headers) request.set(name, value);
    request.body() = body;
    request.prepare_payload();
    http::write(stream, request);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(1ull << 30);
    http::read(stream, buffer, parser);
    reply.status = parser.get().result_int();
    reply.body = parser.get().body();
    reply.content_type = std::string(parser.get()[http::field::content_type]);
    reply.content_encoding = std::string(parser.get()[http::field::content_encoding]);
    for (const auto& field : parser.get()) {
      reply.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  } catch (const std::exception& e) {
    reply.status = 0;
    reply.body = e.what();
  }
  return reply;
}

std::string MakeTempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir = std::filesystem::path(base ? base : "/tmp") /
                              ("kiln_e2e_" + std::to_string(getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

namespace {

pid_t Spawn(const std::vector<std::string>& args, const std::string& log_path) {
  std::vector<std::string> argv_storage = {KILN_BINARY};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

int WaitPid(pid_t pid, double timeout_s) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

ServerProcess::ServerProcess(std::vector<std::string> args, bool with_rest) {
  grpc_port_ = FreePort();
  args.push_back("--port=" + std::to_string(grpc_port_));
  if (with_rest) {
    rest_port_ = FreePort();
    while (rest_port_ == grpc_port_) rest_port_ = FreePort();
    args.push_back("--rest_api_port=" + std::to_string(rest_port_));
  }
  static int counter = 0;
  log_path_ = MakeTempDir("log" + std::to_string(counter++)) + "/serve.log";
  pid_ = Spawn(args, log_path_);
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    WaitPid(pid_, 10);
  }
}

bool ServerProcess::WaitUntilServing(double timeout_s) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    if (rest_port_ > 0) {
      if (HttpCall(rest_port_, "GET", "/v2/health/live").status == 200) return true;
    } else if (Log().find("Running gRPC ModelServer") != std::string::npos) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

int ServerProcess::Terminate(double timeout_s) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  const int code = WaitPid(pid_, timeout_s);
  if (code >= 0) pid_ = -1;
  return code;
}

void ServerProcess::Signal(int signal_number) {
  if (pid_ > 0) kill(pid_, signal_number);
}

int ServerProcess::WaitForExit(double timeout_s) {
  if (pid_ <= 0) return -1;
  const int code = WaitPid(pid_, timeout_s);
  if (code >= 0) pid_ = -1;
  return code;
}

std::string ServerProcess::Log() const { return ReadFile(log_path_); }

std::unique_ptr<tensorflow::serving::PredictionService::Stub> ServerProcess::PredictionStub()
    const {
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port_),
                                     grpc::InsecureChannelCredentials());
  return tensorflow::serving::PredictionService::NewStub(channel);
}

std::unique_ptr<tensorflow::serving::ModelService::Stub> ServerProcess::ModelStub() const {
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port_),
                                     grpc::InsecureChannelCredentials());
  return tensorflow::serving::ModelService::NewStub(channel);
}

int RunKiln(const std::vector<std::string>& args, std::string* output, double timeout_s) {
  static int counter = 0;
  const std::string log = MakeTempDir("run" + std::to_string(counter++)) + "/out.log";
  const pid_t pid = Spawn(args, log);
  int code = WaitPid(pid, timeout_s);
  if (code < 0) {
    kill(pid, SIGKILL);
    WaitPid(pid, 5);
  }
  *output = ReadFile(log);
  return code;
}

}  // namespace kiln::serving::testing
