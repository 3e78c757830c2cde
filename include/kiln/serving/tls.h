// TLS for `kiln serve`: TF Serving's --ssl_config_file (an SSLConfig text proto whose fields
// hold PEM contents: server_key, server_cert, custom_ca, client_verify) for the gRPC port, and
// the same certificate for the REST port when --rest_api_ssl is set (a Kiln option; TF
// Serving's REST port has no TLS).
//
// The PEM contents are checked with OpenSSL before anything listens, so that a missing,
// malformed or mismatched key or certificate stops the server at start with a message naming
// the field, instead of surfacing as handshake failures at the first client.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tensorflow_serving/config/ssl_config.pb.h"

namespace grpc {
class ServerCredentials;
}

namespace kiln::serving {

// Reads the text proto at `path` and checks it with ValidateSslConfig. Errors start with
// "--ssl_config_file" and name the file and the field.
absl::StatusOr<tensorflow::serving::SSLConfig> ReadSslConfig(const std::string& path);

// server_key is a PEM private key, server_cert a PEM certificate whose public key is the
// key's, custom_ca (when set) one or more PEM certificates. client_verify without custom_ca is
// allowed, as in TF Serving (client certificates are then checked against the default roots).
absl::Status ValidateSslConfig(const tensorflow::serving::SSLConfig& config);

// gRPC server credentials as TF Serving builds them: with client_verify, a client must present
// a certificate that custom_ca verifies; otherwise none is asked for.
std::shared_ptr<grpc::ServerCredentials> GrpcServerCredentials(
    const tensorflow::serving::SSLConfig& config);

}  // namespace kiln::serving
