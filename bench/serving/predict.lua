-- wrk script: POSTs a TF Serving predict request. Body from the environment (KILN_BODY) or the
-- half_plus_two default; counts non-200 answers so a run with errors is visible.
wrk.method = "POST"
wrk.body = os.getenv("KILN_BODY") or '{"instances": [[1.0], [2.0], [5.0]]}'
wrk.headers["Content-Type"] = "application/json"

local errors = 0
function response(status, headers, body)
  if status ~= 200 then errors = errors + 1 end
end

function done(summary, latency, requests)
  io.write(string.format("requests=%d errors_non2xx=%d socket_errors=%d rps=%.0f " ..
                         "p50_us=%d p99_us=%d\n",
                         summary.requests, summary.errors.status,
                         summary.errors.connect + summary.errors.read + summary.errors.write +
                         summary.errors.timeout,
                         summary.requests / (summary.duration / 1e6),
                         latency:percentile(50), latency:percentile(99)))
end
