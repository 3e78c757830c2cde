#include "kiln/serving/tls.h"

#include <grpcpp/security/server_credentials.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "serving/text_proto.h"

namespace kiln::serving {

using tensorflow::serving::SSLConfig;

namespace {

// OpenSSL's error queue as one line (and emptied, so the next check starts clean).
std::string OpenSslErrors() {
  std::string out;
  while (unsigned long code = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof(buffer));
    absl::StrAppend(&out, out.empty() ? "" : "; ", buffer);
  }
  return out.empty() ? "no PEM block found" : out;
}

struct BioDeleter {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct CertDeleter {
  void operator()(X509* cert) const { X509_free(cert); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

absl::Status FieldError(const char* field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("--ssl_config_file: ", field, " ", why));
}

// The first PEM object in `field`'s text, read by `read` (PEM_read_bio_PrivateKey,
// PEM_read_bio_X509); when it holds none, `field`'s error saying that it is not `what`.
template <typename T, typename Deleter>
absl::Status ReadPem(const char* field, const std::string& pem,
                     T* (*read)(BIO*, T**, pem_password_cb*, void*), const char* what,
                     std::unique_ptr<T, Deleter>* out) {
  BioPtr bio = MemoryBio(pem);
  out->reset(read(bio.get(), nullptr, nullptr, nullptr));
  if (*out == nullptr) {
    return FieldError(field, absl::StrCat("is not ", what, ": ", OpenSslErrors()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSslConfig(const SSLConfig& config) {
  ERR_clear_error();
  if (config.server_key().empty()) return FieldError("server_key", "is empty");
  if (config.server_cert().empty()) return FieldError("server_cert", "is empty");
  std::unique_ptr<EVP_PKEY, KeyDeleter> key;
  KILN_RETURN_IF_ERROR(ReadPem("server_key", config.server_key(), PEM_read_bio_PrivateKey,
                               "a PEM private key (an unencrypted \"-----BEGIN PRIVATE "
                               "KEY-----\" block)",
                               &key));
  std::unique_ptr<X509, CertDeleter> cert;
  KILN_RETURN_IF_ERROR(ReadPem("server_cert", config.server_cert(), PEM_read_bio_X509,
                               "a PEM certificate (a \"-----BEGIN CERTIFICATE-----\" block)",
                               &cert));
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return FieldError("server_key",
                      "does not match server_cert (the certificate's public key is not this "
                      "key's)");
  }
  if (!config.custom_ca().empty()) {
    BioPtr ca_bio = MemoryBio(config.custom_ca());
    int certificates = 0;
    while (true) {
      std::unique_ptr<X509, CertDeleter> ca(
          PEM_read_bio_X509(ca_bio.get(), nullptr, nullptr, nullptr));
      if (ca == nullptr) break;
      ++certificates;
    }
    // The loop ends at the end of the data (PEM_R_NO_START_LINE) or at a broken block.
    const unsigned long last = ERR_peek_last_error();
    const bool clean_end = ERR_GET_LIB(last) == ERR_LIB_PEM &&
                           ERR_GET_REASON(last) == PEM_R_NO_START_LINE && certificates > 0;
    if (!clean_end) {
      return FieldError(
          "custom_ca",
          absl::StrCat(certificates == 0 ? "holds no PEM certificate: "
                                         : "has a malformed certificate after ",
                       certificates == 0
                           ? OpenSslErrors()
                           : absl::StrCat(certificates, " good ones: ", OpenSslErrors())));
    }
    ERR_clear_error();
  }
  return absl::OkStatus();
}

absl::StatusOr<SSLConfig> ReadSslConfig(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(SSLConfig config, ReadTextProto<SSLConfig>(path, "ssl_config_file"));
  absl::Status valid = ValidateSslConfig(config);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(valid.message(), " (in ", path, ")"));
  }
  return config;
}

std::shared_ptr<grpc::ServerCredentials> GrpcServerCredentials(const SSLConfig& config) {
  grpc::SslServerCredentialsOptions options(
      config.client_verify() ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                             : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.force_client_auth = config.client_verify();
  if (!config.custom_ca().empty()) options.pem_root_certs = config.custom_ca();
  options.pem_key_cert_pairs.push_back({config.server_key(), config.server_cert()});
  return grpc::SslServerCredentials(options);
}

}  // namespace kiln::serving
