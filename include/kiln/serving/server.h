// `kiln serve`: tensorflow_model_server's command line and the process that runs it (gRPC on
// --port, REST on --rest_api_port, config polling, graceful shutdown on SIGTERM/SIGINT).
#pragma once

#include "kiln/serving/flags.h"

namespace kiln::serving {

// What `--version` prints (the status page shows it too).
inline constexpr char kServerVersion[] =
    "TensorFlow ModelServer: kiln\nTensorFlow Library: none (kiln runtime)";

// How long requests in flight may take to finish after SIGTERM or SIGINT. The drain: at the
// signal /v2/health/ready answers 503, both front ends stop accepting connections (the REST
// listener is shut at once, so a load balancer's new connections are refused and go to
// another replica), replies to requests still arriving on open connections close those
// connections, and requests in flight get up to this long before the process exits.
// deploy/k8s sizes terminationGracePeriodSeconds from it (tests/deploy checks that).
inline constexpr int kShutdownGraceSeconds = 10;

// Runs the server until SIGTERM or SIGINT; returns the process exit code.
int RunServer(const ServeFlags& flags);

}  // namespace kiln::serving
