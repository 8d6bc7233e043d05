-- wrk script: POST the hidden vector in $HIDDEN_FILE to /cobordism-lm-head.
local f = assert(io.open(os.getenv("HIDDEN_FILE"), "rb"))
wrk.method = "POST"
wrk.path = "/cobordism-lm-head"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/octet-stream"

local statuses = {}
function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  io.write(string.format("requests %d, errors (socket) %d, non-2xx %d\n", summary.requests,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status))
  io.write(string.format("latency p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
