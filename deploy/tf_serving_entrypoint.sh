#!/bin/bash
# TF Serving's container entrypoint (tensorflow/serving's /usr/bin/tf_serving_entrypoint.sh),
# for Kiln: gRPC on 8500, REST on 8501, the model $MODEL_NAME from $MODEL_BASE_PATH/$MODEL_NAME,
# and every argument passed through after these (a later flag wins, so `--rest_api_port=9001`
# or `--model_config_file=...` given to `docker run` override the defaults, as with TF Serving).
#
# `exec`: the server becomes the container's PID 1 and receives SIGTERM itself, so that
# `docker stop` and Kubernetes drain it (see kShutdownGraceSeconds in
# include/kiln/serving/server.h) instead of killing a shell.
exec tensorflow_model_server --port=8500 --rest_api_port=8501 \
  --model_name="${MODEL_NAME:-model}" \
  --model_base_path="${MODEL_BASE_PATH:-/models}/${MODEL_NAME:-model}" \
  "$@"
