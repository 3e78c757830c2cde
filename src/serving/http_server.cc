#include "kiln/serving/http_server.h"

#include <sys/socket.h>
#include <zlib.h>

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/version.hpp>
#include <chrono>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kiln::serving {

absl::StatusOr<std::string> InflateBody(absl::string_view compressed, size_t max_bytes) {
  z_stream stream{};
  // 15 + 32: zlib or gzip, told apart by the header.
  if (inflateInit2(&stream, 15 + 32) != Z_OK) {
    return absl::InternalError("cannot initialize zlib to decompress the request body");
  }
  std::string out;
  size_t used = 0;
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  stream.avail_in = static_cast<uInt>(compressed.size());
  absl::Status status;
  while (true) {
    if (used == out.size()) {
      // Grow in steps, never past the limit + 1 byte (which tells "over the limit").
      if (out.size() > max_bytes) break;
      const size_t grow = std::min<size_t>(
          {std::max<size_t>(out.size(), 64 * 1024), max_bytes + 1 - out.size(), 1u << 30});
      out.resize(out.size() + grow);
    }
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + used);
    stream.avail_out = static_cast<uInt>(out.size() - used);
    const int result = inflate(&stream, Z_NO_FLUSH);
    used = out.size() - stream.avail_out;
    if (result == Z_STREAM_END) {
      if (stream.avail_in == 0) break;
      inflateReset(&stream);  // the next member of a multi-member gzip stream
      continue;
    }
    if (result == Z_BUF_ERROR && stream.avail_in == 0) {
      status = absl::InvalidArgumentError("the gzip request body is truncated");
      break;
    }
    if (result != Z_OK && result != Z_BUF_ERROR) {
      status = absl::InvalidArgumentError(absl::StrCat("the request body is not valid gzip data: ",
                                                       stream.msg ? stream.msg : "corrupt"));
      break;
    }
  }
  inflateEnd(&stream);
  if (!status.ok()) return status;
  if (used > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the request body decompresses to more than the limit of ", max_bytes, " bytes"));
  }
  out.resize(used);
  return out;
}

std::string GzipCompress(absl::string_view data) {
  z_stream stream{};
  // Z_BEST_SPEED: replies are compressed on the request's thread; most of the gain of gzip on
  // JSON numbers comes at the fastest level.
  if (deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return std::string(data);
  }
  std::string out(deflateBound(&stream, data.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

bool AcceptsGzip(absl::string_view accept_encoding) {
  for (absl::string_view item : absl::StrSplit(accept_encoding, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, ';');
    if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(parts[0]), "gzip")) continue;
    for (size_t i = 1; i < parts.size(); ++i) {
      absl::string_view param = absl::StripAsciiWhitespace(parts[i]);
      double q;
      if (absl::ConsumePrefix(&param, "q=") && absl::SimpleAtod(param, &q) && q <= 0) {
        return false;
      }
    }
    return true;
  }
  return false;
}

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  net::io_context ioc;
  std::unique_ptr<net::ssl::context> tls;  // set: HTTPS (options.tls)
  std::unique_ptr<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
  std::atomic<int> in_flight{0};
  std::atomic<bool> stopping{false};

  void Accept();
};

namespace {

// One connection. `Stream`: beast::tcp_stream (HTTP) or beast::ssl_stream over it (HTTPS);
// everything but the handshake and the close is the same for both.
template <typename Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;
  using std::enable_shared_from_this<Session<Stream>>::shared_from_this;

 public:
  Session(tcp::socket socket, HttpServer::Impl* server)
      : stream_(MakeStream(std::move(socket), server)), server_(server) {}
  // A session dropped on an unexpected path must not leave Shutdown waiting for it.
  ~Session() { EndRequest(); }

  void Start() {
    if constexpr (kTls) {
      // A client that does not speak TLS (plain HTTP on this port) fails here and only its
      // connection is closed; the handshake has the same timeout as a read.
      Lowest().expires_after(std::chrono::milliseconds(server_->options.timeout_ms));
      stream_.async_handshake(net::ssl::stream_base::server,
                              [self = shared_from_this()](beast::error_code error) {
                                if (error) {
                                  self->Lowest().close();
                                  return;
                                }
                                self->Read();
                              });
    } else {
      Read();
    }
  }

 private:
  static Stream MakeStream(tcp::socket socket, HttpServer::Impl* server) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *server->tls);
    } else {
      return Stream(std::move(socket));
    }
  }
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  void Read() {
    parser_.emplace();
    parser_->body_limit(server_->options.max_body_bytes);
    parser_->header_limit(64 * 1024);
    Lowest().expires_after(std::chrono::milliseconds(server_->options.timeout_ms));
    if (buffer_.size() > 0) {
      ReadRequest();
      return;
    }
    // Wait for the request's first bytes on their own, so that a request counts as in flight
    // from then on (Shutdown waits for it, also while its body is still uploading), while a
    // keep-alive connection with nothing sent does not hold Shutdown up.
    stream_.async_read_some(buffer_.prepare(64 * 1024),
                            [self = shared_from_this()](beast::error_code error, size_t bytes) {
                              self->buffer_.commit(bytes);
                              if (error) {
                                self->OnRead(error, 0);
                                return;
                              }
                              self->ReadRequest();
                            });
  }

  void ReadRequest() {
    BeginRequest();
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::OnRead, shared_from_this()));
  }

  // One request in flight, from its first byte until its answer is written or it fails.
  void BeginRequest() {
    if (!in_flight_) server_->in_flight.fetch_add(1);
    in_flight_ = true;
  }
  void EndRequest() {
    if (in_flight_) server_->in_flight.fetch_sub(1);
    in_flight_ = false;
  }

  void OnRead(beast::error_code error, size_t) {
    if (error == http::error::end_of_stream || error == net::error::operation_aborted ||
        error == beast::error::timeout || error == net::error::connection_reset ||
        error == net::error::eof || error == net::ssl::error::stream_truncated) {
      EndRequest();
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
    auto& message = parser_->get();
    HttpRequest request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    request.body = std::move(message.body());
    for (const auto& field : message) {
      request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    const bool keep_alive = message.keep_alive() && !server_->stopping.load();
    // TF Serving decompresses gzip request bodies; the limit applies to the decompressed size.
    const auto encoding_header = message[http::field::content_encoding];
    const absl::string_view encoding = absl::StripAsciiWhitespace(
        absl::string_view(encoding_header.data(), encoding_header.size()));
    HttpResponse response;
    if (!encoding.empty() && !absl::EqualsIgnoreCase(encoding, "identity")) {
      if (absl::EqualsIgnoreCase(encoding, "gzip") || absl::EqualsIgnoreCase(encoding, "x-gzip") ||
          absl::EqualsIgnoreCase(encoding, "deflate")) {
        auto inflated = InflateBody(request.body, server_->options.max_body_bytes);
        if (inflated.ok()) {
          request.body = *std::move(inflated);
        } else {
          response = ErrorResponse(inflated.status());
          if (absl::IsResourceExhausted(inflated.status())) response.status = 413;
        }
      } else {
        response = ErrorResponse(absl::InvalidArgumentError(absl::StrCat(
            "Content-Encoding \"", encoding, "\" is not supported (gzip, deflate or identity)")));
        response.status = 415;
      }
    }
    if (response.status == 200) response = server_->handler(request);
    if (!response.body.empty() &&
        AcceptsGzip(absl::string_view(message[http::field::accept_encoding].data(),
                                      message[http::field::accept_encoding].size()))) {
      response.body = GzipCompress(response.body);
      response.gzip = true;
    }
    Send(std::move(response), keep_alive, message.version(), /*whole_request=*/true);
  }

  void Send(HttpResponse response, bool keep_alive, unsigned version, bool whole_request = false) {
    auto message = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(response.status), version);
    message->set(http::field::server, "kiln");
    message->set(http::field::content_type, response.content_type);
    if (response.gzip) {
      message->set(http::field::content_encoding, "gzip");
      message->set(http::field::vary, "Accept-Encoding");
    }
    for (const auto& [name, value] : response.headers) message->set(name, value);
    message->body() = std::move(response.body);
    message->keep_alive(keep_alive);
    message->prepare_payload();
    Lowest().expires_after(std::chrono::milliseconds(server_->options.timeout_ms));
    auto self = shared_from_this();
    http::async_write(stream_, *message,
                      [self, message, keep_alive, whole_request](beast::error_code error, size_t) {
                        self->EndRequest();
                        if (!error && !keep_alive && !whole_request) {
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
    Lowest().expires_after(std::chrono::seconds(2));
    drain_buffer_.resize(64 * 1024);
    stream_.async_read_some(net::buffer(drain_buffer_),
                            [self = shared_from_this()](beast::error_code error, size_t) {
                              if (!error) self->Drain();
                            });
  }

  void Close() {
    if constexpr (kTls) {
      // TLS's close_notify first, so that the client sees a clean end rather than a
      // truncation; the TCP half-close follows once it is sent (or failed).
      Lowest().expires_after(std::chrono::seconds(2));
      stream_.async_shutdown([self = shared_from_this()](beast::error_code) {
        beast::error_code ignored;
        self->Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
      });
    } else {
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    }
  }

  Stream stream_;
  beast::flat_buffer buffer_;
  HttpServer::Impl* server_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::vector<char> drain_buffer_;
  bool in_flight_ = false;  // counted in server_->in_flight
};

}  // namespace

void HttpServer::Impl::Accept() {
  acceptor->async_accept(
      net::make_strand(ioc), [this](beast::error_code error, tcp::socket socket) {
        if (error) {
          if (stopping.load()) return;
        } else {
          socket.set_option(tcp::no_delay(true), error);
          if (tls != nullptr) {
            std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(std::move(socket), this)
                ->Start();
          } else {
            std::make_shared<Session<beast::tcp_stream>>(std::move(socket), this)->Start();
          }
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
  if (options.tls.has_value()) {
    impl.tls = std::make_unique<net::ssl::context>(net::ssl::context::tls_server);
    impl.tls->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                          net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                          net::ssl::context::no_tlsv1_1);
    const HttpServerOptions::Tls& tls = *options.tls;
    impl.tls->use_certificate_chain(net::buffer(tls.cert_pem), error);
    if (error) {
      return absl::InvalidArgumentError(
          absl::StrCat("REST TLS: bad server certificate: ", error.message()));
    }
    impl.tls->use_private_key(net::buffer(tls.key_pem), net::ssl::context::pem, error);
    if (error) {
      return absl::InvalidArgumentError(
          absl::StrCat("REST TLS: bad server key: ", error.message()));
    }
    if (tls.verify_client) {
      impl.tls->set_verify_mode(net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert);
      if (!tls.client_ca_pem.empty()) {
        impl.tls->add_certificate_authority(net::buffer(tls.client_ca_pem), error);
      } else {
        impl.tls->set_default_verify_paths(error);
      }
      if (error) {
        return absl::InvalidArgumentError(
            absl::StrCat("REST TLS: bad client CA: ", error.message()));
      }
    }
  }
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
  // A request counts from its first bytes read (Session::BeginRequest); bytes a client sent
  // just before the signal may still wait in the socket for an I/O thread. The settle time
  // lets them be read, so that such a request is answered rather than its connection closed
  // as idle (seen under load in shutdown_memory_e2e_test).
  const auto start = std::chrono::steady_clock::now();
  const auto settle = start + std::chrono::milliseconds(std::min(grace_ms, kSettleMs));
  const auto deadline = start + std::chrono::milliseconds(grace_ms);
  while ((impl_->in_flight.load() > 0 || std::chrono::steady_clock::now() < settle) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  impl_->ioc.stop();
  for (auto& thread : impl_->threads) thread.join();
  impl_->threads.clear();
}

HttpServer::~HttpServer() { Shutdown(0); }

}  // namespace kiln::serving
