-- wrk script for bench/webhook_bench.py: POST the AdmissionReview bodies in turn, keep-alive.
-- Bodies and paths come from files the benchmark writes (one body per file, path list in order):
--   wrk -s bench/post.lua https://127.0.0.1:PORT -- DIR
-- done() prints the latency percentiles wrk's --latency leaves out (p99.9) and the non-2xx count, as JSON.

local requests = {}
local counter = 0

function init(args)
  local dir = args[1]
  local index = io.open(dir .. "/index.txt")
  for line in index:lines() do
    local path, file = line:match("^(%S+)%s+(%S+)$")
    local f = io.open(dir .. "/" .. file, "rb")
    local body = f:read("*a")
    f:close()
    requests[#requests + 1] = wrk.format("POST", path, {
      ["Content-Type"] = "application/json",
      ["Host"] = "gpupolicy-webhook.gpupolicy-system.svc",
      ["User-Agent"] = "kube-apiserver-admission",
    }, body)
  end
  index:close()
end

function request()
  counter = counter + 1
  return requests[(counter % #requests) + 1]
end

function done(summary, latency, requests_)
  local non2xx = summary.errors.status
  io.write(string.format(
    '{"requests": %d, "seconds": %.3f, "rps": %.1f, "p50_ms": %.3f, "p99_ms": %.3f, "p999_ms": %.3f, ' ..
    '"max_ms": %.3f, "non2xx": %d, "socket_errors": %d}\n',
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency:percentile(99.9) / 1000,
    latency.max / 1000, non2xx,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
