-- wrk script for flood_bench.py: POST /a2a with forged bearer tokens — a real token's header and
-- claims (args[1]: "header.payload", a published kid) and a fresh random 64-byte signature on
-- every request, so nothing can remember the last one — counting who answered: 401 = authz
-- checked the signature, 429 = Envoy's per-address budget refused it first. args[2]: the pause
-- (ms) each connection takes before its next request, so the flood's offered rate is set by the
-- bench rather than by how fast the edge answers (a 429 is quicker than a signature check).
-- args[3]: the client address the flood claims in x-forwarded-for (for an Envoy that trusts one
-- hop, as behind an ingress): an address (every request from it), "many" (a random 10.x.y.z on
-- every request) or absent (no header). 503 = authz's per-process bound (verification_busy).
local body = '{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}'
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

local ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

function init(args)
  signed = args[1]
  pause = tonumber(args[2] or "0")
  source = args[3]
  checked, refused, busy, other = 0, 0, 0, 0
  math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)"), 16))
end

function delay()
  return pause
end

-- The last of 86 characters carries 2 bits of the 64th byte and 4 zero bits: only these four
-- spell canonical base64url there. Any other is refused as malformed before a signature is
-- checked (authz decodes strictly) — which 15 in 16 of this flood's tokens were until it chose
-- the last character from these.
local LAST = "AQgw"

local function signature()
  local chars = {}
  for i = 1, 85 do  -- 64 bytes, base64url without padding
    local n = math.random(1, 64)
    chars[i] = ALPHABET:sub(n, n)
  end
  local n = math.random(1, 4)
  chars[86] = LAST:sub(n, n)
  return table.concat(chars)
end

function request()
  local headers = {
    ["Content-Type"] = "application/json",
    ["A2A-Version"] = "1.0",
    ["Authorization"] = "Bearer " .. signed .. "." .. signature(),
  }
  if source == "many" then
    headers["X-Forwarded-For"] = string.format("10.%d.%d.%d", math.random(0, 255),
                                               math.random(0, 255), math.random(1, 254))
  elseif source ~= nil and source ~= "" then
    headers["X-Forwarded-For"] = source
  end
  return wrk.format("POST", "/a2a", headers, body)
end

function response(status, headers, response_body)
  if status == 401 then
    checked = checked + 1
  elseif status == 429 then
    refused = refused + 1
  elseif status == 503 then
    busy = busy + 1
  else
    other = other + 1
  end
end

function done(summary, latency, requests)
  local totals = {checked = 0, refused = 0, busy = 0, other = 0}
  for _, thread in ipairs(threads) do
    for name, _ in pairs(totals) do
      totals[name] = totals[name] + thread:get(name)
    end
  end
  io.write(string.format("flood: checked=%d refused=%d busy=%d other=%d\n",
                         totals.checked, totals.refused, totals.busy, totals.other))
end
