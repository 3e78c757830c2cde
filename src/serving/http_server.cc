#include "kiln/serving/http_server.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/version.hpp>
#include <sys/socket.h>

#include <chrono>

#include "absl/strings/str_cat.h"

namespace kiln::serving {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  net::io_context ioc;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
  std::atomic<int> in_flight{0};
  std::atomic<bool> stopping{false};

  void Accept();
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpServer::Impl* server)
      : stream_(std::move(socket)), server_(server) {}

  void Start() { Read(); }

 private:
  void Read() {
    parser_.emplace();
    parser_->body_limit(server_->options.max_body_bytes);
    parser_->header_limit(64 * 1024);
    stream_.expires_after(std::chrono::milliseconds(server_->options.timeout_ms));
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::OnRead, shared_from_this()));
  }

  void OnRead(beast::error_code error, size_t) {
    if (error == http::error::end_of_stream || error == net::error::operation_aborted ||
        error == beast::error::timeout || error == net::error::connection_reset ||
        error == net::error::eof) {
      Close();
      return;
    }
    if (error == http::error::body_limit) {
      HttpResponse response = ErrorResponse(absl::ResourceExhaustedError(absl::StrCat(
          "request body exceeds the limit of ", server_->options.max_body_bytes, " bytes")));
      response.status = 413;
      Send(std::move(response), /*keep_alive=*/false, 11);
      return;
    }
    if (error) {
      HttpResponse response = ErrorResponse(
          absl::InvalidArgumentError(absl::StrCat("Malformed request: ", error.message())));
      Send(std::move(response), /*keep_alive=*/false, 11);
      return;
    }
    server_->in_flight.fetch_add(1);
    auto& message = parser_->get();
    HttpRequest request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    request.body = std::move(message.body());
    HttpResponse response = server_->handler(request);
    const bool keep_alive = message.keep_alive() && !server_->stopping.load();
    Send(std::move(response), keep_alive, message.version(), /*counted=*/true);
  }

  void Send(HttpResponse response, bool keep_alive, unsigned version, bool counted = false) {
    auto message = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(response.status), version);
    message->set(http::field::server, "kiln");
    message->set(http::field::content_type, response.content_type);
    message->body() = std::move(response.body);
    message->keep_alive(keep_alive);
    message->prepare_payload();
    stream_.expires_after(std::chrono::milliseconds(server_->options.timeout_ms));
    auto self = shared_from_this();
    http::async_write(stream_, *message,
                      [self, message, keep_alive, counted](beast::error_code error, size_t) {
                        if (counted) self->server_->in_flight.fetch_sub(1);
                        if (!error && !keep_alive && !counted) {
                          // An early error answer: read what the client still sends, so that
                          // closing with unread bytes (a TCP reset) does not destroy the
                          // answer before the client reads it.
                          self->Close();
                          self->Drain();
                          return;
                        }
                        if (error || !keep_alive) {
                          self->Close();
                          return;
                        }
                        self->Read();
                      });
  }

  void Drain() {
    stream_.expires_after(std::chrono::seconds(2));
    drain_buffer_.resize(64 * 1024);
    stream_.async_read_some(net::buffer(drain_buffer_),
                            [self = shared_from_this()](beast::error_code error, size_t) {
                              if (!error) self->Drain();
                            });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  HttpServer::Impl* server_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::vector<char> drain_buffer_;
};

}  // namespace

void HttpServer::Impl::Accept() {
  acceptor->async_accept(net::make_strand(ioc), [this](beast::error_code error, tcp::socket socket) {
    if (error) {
      if (stopping.load()) return;
    } else {
      socket.set_option(tcp::no_delay(true), error);
      std::make_shared<Session>(std::move(socket), this)->Start();
    }
    if (!stopping.load()) Accept();
  });
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              Handler handler) {
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->impl_ = std::make_unique<Impl>();
  Impl& impl = *server->impl_;
  impl.options = options;
  impl.handler = std::move(handler);
  beast::error_code error;
  auto address = net::ip::make_address(options.address, error);
  if (error) {
    return absl::InvalidArgumentError(absl::StrCat("bad REST address ", options.address));
  }
  tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
  impl.acceptor = std::make_unique<tcp::acceptor>(impl.ioc);
  impl.acceptor->open(endpoint.protocol(), error);
  if (!error) impl.acceptor->set_option(net::socket_base::reuse_address(true), error);
  if (!error) impl.acceptor->bind(endpoint, error);
  if (!error) impl.acceptor->listen(net::socket_base::max_listen_connections, error);
  if (error) {
    return absl::UnavailableError(absl::StrCat("cannot listen for REST on ", options.address, ":",
                                               options.port, ": ", error.message()));
  }
  server->port_ = impl.acceptor->local_endpoint().port();
  impl.Accept();
  const int threads = std::max(1, options.num_threads);
  for (int i = 0; i < threads; ++i) {
    impl.threads.emplace_back([&impl] { impl.ioc.run(); });
  }
  return server;
}

void HttpServer::Shutdown(int grace_ms) {
  if (impl_ == nullptr || impl_->stopping.exchange(true)) return;
  // Stop accepting now, even when every I/O thread is busy in a handler (a batched request
  // can hold one for its batch timeout) and the posted close below has to wait: shutting the
  // listening socket down makes the kernel refuse new connections at once instead of queueing
  // them in the backlog.
  ::shutdown(impl_->acceptor->native_handle(), SHUT_RDWR);
  net::post(impl_->ioc, [this] {
    beast::error_code ignored;
    impl_->acceptor->close(ignored);
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  while (impl_->in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  impl_->ioc.stop();
  for (auto& thread : impl_->threads) thread.join();
  impl_->threads.clear();
}

HttpServer::~HttpServer() { Shutdown(0); }

}  // namespace kiln::serving
