-- anarchon lease strategy: L1-L9 and L11 in one script (DESIGN section 5).
-- KEYS: runs (hash slot -> run JSON), slots (zset), leases (zset slot by lease end),
--       floor (string), events (stream)
-- ARGV[1] = op: claim | renew | finish | release; the rest depends on op (see below).
-- now is Redis TIME, read inside the script (T1). Replies:
--   claim:  {"outcome attempt lease_until status now floor token", holder} ("-" for none;
--           packed in one string because parsing a long reply costs the client more than the
--           script costs the server)
--   others: 1 if the run is running with the caller's token (and was changed), else 0.
local runs, slots, leases, floor_key, events = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local op = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local SWEEP_MAX = 100
local STATUS = {running = true, succeeded = true, failed = true, interrupted = true}

local function corrupt(where, what)
  error({err = 'ANARCHON-CORRUPT ' .. where .. ': ' .. what})
end

local function decode(raw, field)
  local where = 'key ' .. runs .. ' field ' .. field
  local ok, run = pcall(cjson.decode, raw)
  if not ok or type(run) ~= 'table' then corrupt(where, 'not a JSON object') end
  if not STATUS[run.status] then corrupt(where, 'status is not one anarchon writes') end
  if type(run.attempt) ~= 'number' or run.attempt < 1 then corrupt(where, 'attempt is not >= 1') end
  if type(run.token) ~= 'string' or type(run.holder) ~= 'string' then
    corrupt(where, 'token or holder is not text')
  end
  if type(run.keep_until) ~= 'number' then corrupt(where, 'keep_until is not a number') end
  if run.status == 'running' and type(run.lease_until) ~= 'number' then
    corrupt(where, 'running with no lease_until')
  end
  return run
end

local function save(field, run)
  redis.call('HSET', runs, field, cjson.encode(run))
  if run.status == 'running' then
    redis.call('ZADD', leases, run.lease_until, field)
  else
    redis.call('ZREM', leases, field)
  end
end

local function event(field, run, what, history_limit)
  redis.call('XADD', events, 'MAXLEN', '~', history_limit, '*', 'event', what, 'slot', field,
    'attempt', run.attempt, 'token', run.token, 'holder', run.holder)
end

local function current_floor()
  local raw = redis.call('GET', floor_key)
  if not raw then return false end
  local value = tonumber(raw)
  if not value or value ~= math.floor(value) then
    corrupt('key ' .. floor_key, 'not a slot in epoch milliseconds')
  end
  return value
end

-- L11: beyond the newest history_limit runs, forget the oldest while they are past keep_until
-- and hold no live lease (at most SWEEP_MAX per claim); the floor rises to the newest forgotten.
local function sweep(history_limit)
  local excess = math.min(redis.call('ZCARD', slots) - history_limit, SWEEP_MAX)
  if excess <= 0 then return end
  local last = nil
  for _, field in ipairs(redis.call('ZRANGE', slots, 0, excess - 1)) do
    local raw = redis.call('HGET', runs, field)
    if raw then
      local run = decode(raw, field)
      local live = run.status == 'running' and run.lease_until >= now
      if run.keep_until >= now or live then break end
    end
    redis.call('HDEL', runs, field)
    redis.call('ZREM', slots, field)
    redis.call('ZREM', leases, field)
    last = field
  end
  if last then
    local floor = current_floor()
    if not floor or tonumber(last) > floor then redis.call('SET', floor_key, last) end
  end
end

local function other_live(field)
  for _, other in ipairs(redis.call('ZRANGEBYSCORE', leases, now, '+inf')) do
    if other ~= field then
      local raw = redis.call('HGET', runs, other)
      if raw then
        local run = decode(raw, other)
        if run.status == 'running' and run.lease_until >= now then return true end
      end
    end
  end
  return false
end

local function answer(outcome, run, floor)
  local f = floor and string.format('%d', floor) or '-'
  if run then
    local lease = run.lease_until and string.format('%d', run.lease_until) or '-'
    return {string.format('%s %d %s %s %d %s %s', outcome, run.attempt, lease, run.status, now, f,
      run.token), run.holder}
  end
  return {string.format('%s 0 - - %d %s -', outcome, now, f), ''}
end

-- claim ARGV: op, "slot token lease_ms max_late_ms skip(1|0) attempts margin_ms history_limit",
--             instance
local function claim()
  local field, token, lease_s, late_s, skip_s, attempts_s, margin_s, limit_s = string.match(
    ARGV[2], '^(%d+) (%x+) (%d+) (%d+) ([01]) (%d+) (%d+) (%d+)$')
  if not field then return redis.error_reply('ANARCHON malformed claim arguments') end
  local instance = ARGV[3]
  local slot, lease_ms, max_late = tonumber(field), tonumber(lease_s), tonumber(late_s)
  local skip, attempts = skip_s == '1', tonumber(attempts_s)
  local margin, history_limit = tonumber(margin_s), tonumber(limit_s)
  local raw = redis.call('HGET', runs, field)
  if not raw then -- L1
    local floor = current_floor()
    if (floor and slot <= floor) or now - slot > max_late then return answer('late', nil, floor) end
    if skip and other_live(field) then return answer('overlap', nil, floor) end
    local run = {status = 'running', attempt = 1, token = token, holder = instance,
      claimed_at = now, lease_until = now + lease_ms,
      keep_until = slot + max_late + attempts * lease_ms + margin}
    save(field, run)
    redis.call('ZADD', slots, slot, field)
    event(field, run, 'won', history_limit)
    sweep(history_limit)
    return answer('won', run, floor)
  end
  local run = decode(raw, field)
  if run.status ~= 'running' then return answer('done', run) end -- L6
  if run.token == token then return answer('won', run) end -- L2
  if run.lease_until >= now then return answer('running', run) end -- L3
  if run.attempt < attempts then -- L4
    run.attempt = run.attempt + 1
    run.token, run.holder, run.claimed_at, run.lease_until = token, instance, now, now + lease_ms
    save(field, run)
    event(field, run, 'won', history_limit)
    return answer('won', run)
  end
  run.status, run.finished_at = 'interrupted', now -- L5
  run.error = 'lease of attempt ' .. run.attempt .. ' ran out with no attempts left'
  save(field, run)
  event(field, run, 'interrupted', history_limit)
  return answer('interrupted', run)
end

-- renew ARGV: op, slot, token, lease_ms | finish: op, slot, token, status, has_error, error,
-- history_limit | release: op, slot, token
local function update()
  local field, token = ARGV[2], ARGV[3]
  local raw = redis.call('HGET', runs, field)
  if not raw then return 0 end
  local run = decode(raw, field)
  if run.status ~= 'running' or run.token ~= token then return 0 end
  if op == 'renew' then
    run.lease_until = now + tonumber(ARGV[4])
  elseif op == 'release' then
    run.lease_until = now - 1
  else
    run.status, run.finished_at = ARGV[4], now
    if ARGV[5] == '1' then run.error = ARGV[6] end
    event(field, run, ARGV[4], ARGV[7])
  end
  save(field, run)
  return 1
end

if op == 'claim' then return claim() end
if op == 'renew' or op == 'finish' or op == 'release' then return update() end
return redis.error_reply('ANARCHON unknown op ' .. tostring(op))
