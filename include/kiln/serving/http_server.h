// An asynchronous HTTP/1.1 server (Boost.Beast on Asio) with keep-alive: a few I/O threads
// serve every connection; a request is handled on the thread that read it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/serving/rest_handler.h"

namespace kiln::serving {

struct HttpServerOptions {
  std::string address = "0.0.0.0";
  int port = 0;  // 0: any free port (see HttpServer::port())
  int num_threads = 4;
  // Bodies above this answer 413 with a JSON error; the connection is then closed.
  size_t max_body_bytes = 256ull << 20;
  // Idle and read/write timeout of a connection.
  int timeout_ms = 30000;
  // Set: HTTPS only, with this PEM key and certificate (chain). verify_client: a client must
  // present a certificate that client_ca_pem (or, when empty, the system's roots) verifies.
  // A client that does not complete the TLS handshake loses only its own connection.
  struct Tls {
    std::string key_pem;
    std::string cert_pem;
    std::string client_ca_pem;
    bool verify_client = false;
  };
  std::optional<Tls> tls;
};

// A request body sent with Content-Encoding gzip (or deflate: zlib), decompressed. The
// decompressed size is bounded by `max_bytes` (RESOURCE_EXHAUSTED beyond it, so a small "zip
// bomb" cannot take the server's memory); a corrupt stream is INVALID_ARGUMENT.
absl::StatusOr<std::string> InflateBody(absl::string_view compressed, size_t max_bytes);
// `data` as a gzip stream (replies to clients that send Accept-Encoding: gzip).
std::string GzipCompress(absl::string_view data);
// Whether an Accept-Encoding header value accepts gzip ("gzip, br", "gzip;q=0.5"; not
// "gzip;q=0").
bool AcceptsGzip(absl::string_view accept_encoding);

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           Handler handler);
  ~HttpServer();

  int port() const { return port_; }
  // Stops accepting, lets requests in progress finish (up to `grace_ms`, and at least
  // kSettleMs of it, for requests whose first bytes had arrived on an open connection), then
  // stops.
  void Shutdown(int grace_ms = 10000);
  static constexpr int kSettleMs = 200;

  struct Impl;

 private:
  HttpServer() = default;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace kiln::serving
