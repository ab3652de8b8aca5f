-- anarchon lease strategy: L1-L9 and L11 in one script (DESIGN section 5).
-- KEYS: runs (hash: slot -> run), slots (zset), leases (zset: slot by lease end),
--       floor (string), events (stream)
-- ARGV[1] = op: claim | renew | finish | release; the rest depends on op (see below).
-- now is Redis TIME, read inside the script (T1).
--
-- A run is one flat string, which the script writes and reads for a fraction of what JSON costs:
--   "<status> <attempt> <claimed_at> <lease_until> <keep_until> <finished_at or -> <token>
--    <n> <holder>[|<error>]"   (one line; <n> is the length of <holder> in bytes)
-- The claim's reply is one string, the cheapest reply for the client to read:
--   "<outcome> <attempt> <lease_until or -> <status or -> <now> <floor or -> <token or -> <holder>"
-- renew, finish and release reply 1 if the run was running with the caller's token (and was
-- changed), else 0.
local runs, slots, leases, floor_key, events = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local op = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_s = string.format('%d', now)
local SWEEP_MAX = 100
local RUN = '^(%l+) (%d+) (%d+) (%d+) (%d+) ([%d-]+) (%x+) (%d+) (.*)$'

local function corrupt(where, what)
  error({err = 'ANARCHON-CORRUPT ' .. where .. ': ' .. what})
end

local function decode(raw, field)
  local status, attempt, claimed, lease, keep, finished, token, n, rest = string.match(raw, RUN)
  local size = tonumber(n)
  if not status or (status ~= 'running' and status ~= 'succeeded' and status ~= 'failed'
     and status ~= 'interrupted') or tonumber(attempt) < 1 or size > #rest
     or (finished ~= '-' and not string.match(finished, '^%d+$')) then
    corrupt('key ' .. runs .. ' field ' .. field,
      'not a run anarchon writes (status attempt claimed_at lease_until keep_until finished_at '
      .. 'token holder)')
  end
  local tail = string.sub(rest, size + 1)
  if tail ~= '' and string.sub(tail, 1, 1) ~= '|' then
    corrupt('key ' .. runs .. ' field ' .. field, 'text after the holder is not an error')
  end
  return {status = status, attempt = attempt, claimed = claimed, lease = lease, keep = keep,
    finished = finished, token = token, holder = string.sub(rest, 1, size), tail = tail}
end

local function save(field, run)
  redis.call('HSET', runs, field, run.status .. ' ' .. run.attempt .. ' ' .. run.claimed .. ' '
    .. run.lease .. ' ' .. run.keep .. ' ' .. run.finished .. ' ' .. run.token .. ' '
    .. #run.holder .. ' ' .. run.holder .. run.tail)
  if run.status == 'running' then
    redis.call('ZADD', leases, run.lease, field)
  else
    redis.call('ZREM', leases, field)
  end
end

local function event(field, what, run, history_limit)
  redis.call('XADD', events, 'MAXLEN', '~', history_limit, '*', 'event', what, 'slot', field,
    'attempt', run.attempt, 'token', run.token, 'holder', run.holder)
end

local function current_floor()
  local raw = redis.call('GET', floor_key)
  if raw and not string.match(raw, '^%d+$') then
    corrupt('key ' .. floor_key, 'not a slot in epoch milliseconds')
  end
  return raw
end

-- L11: beyond the newest history_limit runs, forget the oldest while they are past keep_until
-- and hold no live lease (at most SWEEP_MAX per claim); the floor rises to the newest forgotten.
local function sweep(excess)
  local last = nil
  for _, field in ipairs(redis.call('ZRANGE', slots, 0, excess - 1)) do
    local raw = redis.call('HGET', runs, field)
    if raw then
      local run = decode(raw, field)
      local live = run.status == 'running' and tonumber(run.lease) >= now
      if tonumber(run.keep) >= now or live then break end
    end
    redis.call('HDEL', runs, field)
    redis.call('ZREM', slots, field)
    redis.call('ZREM', leases, field)
    last = field
  end
  if last then
    local floor = current_floor()
    if not floor or tonumber(last) > tonumber(floor) then redis.call('SET', floor_key, last) end
  end
end

local function other_live(field)
  for _, other in ipairs(redis.call('ZRANGEBYSCORE', leases, now, '+inf')) do
    if other ~= field then
      local raw = redis.call('HGET', runs, other)
      if raw then
        local run = decode(raw, other)
        if run.status == 'running' and tonumber(run.lease) >= now then return true end
      end
    end
  end
  return false
end

local function answer(outcome, run)
  return outcome .. ' ' .. run.attempt .. ' ' .. run.lease .. ' ' .. run.status .. ' ' .. now_s
    .. ' - ' .. run.token .. ' ' .. run.holder
end

-- claim ARGV: op, "slot token lease_ms max_late_ms skip(1|0) attempts keep_until history_limit",
--             instance
local function claim()
  local field, token, lease_s, late_s, skip_s, attempts_s, keep, limit = string.match(
    ARGV[2], '^(%d+) (%x+) (%d+) (%d+) ([01]) (%d+) (%d+) (%d+)$')
  if not field then return redis.error_reply('ANARCHON malformed claim arguments') end
  local instance = ARGV[3]
  local raw = redis.call('HGET', runs, field)
  if not raw then -- L1
    local floor = current_floor()
    local slot = tonumber(field)
    if (floor and slot <= tonumber(floor)) or now - slot > tonumber(late_s) then
      return 'late 0 - - ' .. now_s .. ' ' .. (floor or '-') .. ' - '
    end
    if skip_s == '1' and other_live(field) then
      return 'overlap 0 - - ' .. now_s .. ' ' .. (floor or '-') .. ' - '
    end
    local run = {status = 'running', attempt = '1', claimed = now_s,
      lease = string.format('%d', now + tonumber(lease_s)), keep = keep, finished = '-',
      token = token, holder = instance, tail = ''}
    save(field, run)
    redis.call('ZADD', slots, field, field)
    event(field, 'won', run, limit)
    local excess = math.min(redis.call('ZCARD', slots) - tonumber(limit), SWEEP_MAX)
    if excess > 0 then sweep(excess) end
    return 'won 1 ' .. run.lease .. ' running ' .. now_s .. ' ' .. (floor or '-') .. ' ' .. token
      .. ' ' .. instance
  end
  local run = decode(raw, field)
  if run.status ~= 'running' then return answer('done', run) end -- L6
  if run.token == token then return answer('won', run) end -- L2
  if tonumber(run.lease) >= now then return answer('running', run) end -- L3
  local attempt = tonumber(run.attempt)
  if attempt < tonumber(attempts_s) then -- L4
    run.attempt, run.token, run.holder = tostring(attempt + 1), token, instance
    run.claimed, run.lease = now_s, string.format('%d', now + tonumber(lease_s))
    save(field, run)
    event(field, 'won', run, limit)
    return answer('won', run)
  end
  run.status, run.finished = 'interrupted', now_s -- L5
  run.tail = '|lease of attempt ' .. run.attempt .. ' ran out with no attempts left'
  save(field, run)
  event(field, 'interrupted', run, limit)
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
    run.lease = string.format('%d', now + tonumber(ARGV[4]))
  elseif op == 'release' then
    run.lease = string.format('%d', now - 1)
  else
    run.status, run.finished = ARGV[4], now_s
    if ARGV[5] == '1' then run.tail = '|' .. ARGV[6] end
    event(field, ARGV[4], run, ARGV[7])
  end
  save(field, run)
  return 1
end

if op == 'claim' then return claim() end
if op == 'renew' or op == 'finish' or op == 'release' then return update() end
return redis.error_reply('ANARCHON unknown op ' .. tostring(op))
