-- wrk script for adapter_bench.py: blocking SendMessage, one JSON-RPC call per request.
-- args[1] (optional): a file of "request-id<TAB>x-orrery-principal" lines, cycled per request
-- (the assertions authz would mint; the stock server ignores them). Headers given with `wrk -H`
-- are sent too. Every request is a new message (its own messageId): a repeated id would be a
-- retry, answered with the first task without running a turn (docs/contract.md#retries).
local head = '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"'
local tail = '","role":"ROLE_USER","parts":[{"text":"how is checkout?"}]}}}'
local prefix = ""
local sent = 0
local identities = {}
local next_identity = 0
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  bad = 0
  -- Each thread has its own Lua state: a prefix of its own (the address of a fresh table).
  prefix = "bench-" .. tostring({}):match("0x(%x+)") .. "-" .. os.time() .. "-"
  if args[1] then
    for line in io.lines(args[1]) do
      local rid, assertion = line:match("([^\t]+)\t(.+)")
      table.insert(identities, {rid, assertion})
    end
  end
end

function request()
  local headers = {["Content-Type"] = "application/json", ["A2A-Version"] = "1.0"}
  for name, value in pairs(wrk.headers) do  -- `wrk -H` headers (e2e_bench: Authorization)
    headers[name] = value
  end
  if #identities > 0 then
    next_identity = next_identity % #identities + 1
    headers["x-request-id"] = identities[next_identity][1]
    headers["x-orrery-principal"] = identities[next_identity][2]
  end
  sent = sent + 1
  return wrk.format("POST", "/a2a", headers, head .. prefix .. sent .. tail)
end

function response(status, headers, response_body)
  if status ~= 200 or not response_body:find("TASK_STATE_COMPLETED", 1, true) then
    bad = bad + 1
  end
end

function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do
    total = total + thread:get("bad")
  end
  io.write(string.format("not-completed: %d\n", total))
end
