-- anarchon lease strategy: L1-L9 and L11 in one script (DESIGN section 5).
--
-- The keys of a job: runs (hash), slots (sorted set of the job's slots, score = slot), leases
-- (sorted set of running slots, score = lease end, for the overlap rule) and events (stream).
-- Besides one field per slot (the run), the runs hash holds:
--   floor  the newest forgotten slot (L11);
--   n      how many runs the job has (the size of slots), so a claim needs no ZCARD.
-- A run is one flat string, which the script writes and reads for a fraction of what JSON costs:
--   "<status> <attempt> <claimed_at> <lease_until> <keep_until> <finished_at or -> <token>
--    <n> <holder>[|<error>]"   (one line; <n> is the length of <holder> in bytes)
-- A skip record (S1: a slot decided not to run) is "skipped 0 <now> - <keep_until> <now> <token>
-- <n> <holder>|<reason>": no lease, the deciding claim's token and instance, the reason as error.
-- now is Redis TIME, read once per call (T1); a call is one atomic step for all its jobs (C1).
--
-- claim, for one job or many (batch.lua): KEYS = the 4 keys of each job and its pause hash
-- (P1: a slot with no run yet of a paused job is recorded skipped, see paused()); ARGV[1] =
-- 'claim <history_limit>', ARGV[1 + i] = job i's request:
--   "<slot> <token> <lease_ms> <max_late_ms> <skip 1|0> <attempts> <keep_until> <m>
--    <skip_reason><instance>"   (<m>: the length of the caller's skip reason in bytes, 0: none)
-- Each job's answer:
--   "<outcome> <attempt> <lease_until or -> <status or -> <now> <floor or ->[ <token> <holder>]"
-- token and holder are left out when they are the caller's own (always so for a won new run).
-- A skipped slot answers "skipped <attempt> - skipped <now> <floor or -> <token> <reason>
-- <holder>", always with token and holder, the reason written as one word (see word()).
--
-- renew, finish, release: one job's 4 keys; ARGV = op, slot, token, then renew: lease_ms |
-- finish: status, has_error (1|0), error, history_limit. Reply 1 if the run was running with
-- that token (and was changed), else 0; finish also answers 1, changing nothing, when the run
-- already finished with that token and that status (C2: a finish resent after its answer was
-- lost). A finish's error is appended to the run's try log (L12).
--
-- retry (L12): one job's 4 keys; ARGV = 'retry', slot, token, error, delay_ms. While running with
-- that token: the error (a try's entry) joins the try log (the run's error, entries joined by
-- ' | ', its last 4000 characters kept; a resend finds it last and adds nothing), and the run
-- waits until now + delay_ms, still running with that token. Reply 1, else 0.
local op, now, now_s -- of the call being served: set by lease()
local SWEEP_MAX = 100
local RUN = '^(%l+) (%d+) (%d+) ([%d-]+) (%d+) ([%d-]+) (%x+) (%d+) (.*)$'
local CLAIM = '^(%d+) (%x+) (%d+) (%d+) ([01]) (%d+) (%d+) (%d+) (.*)$'
local TRY_SEPARATOR, MAX_TRY_LOG_CHARS = ' | ', 4000
local STATUS = {running = true, succeeded = true, failed = true, interrupted = true,
  skipped = true}

local runs, slots, leases, events, pause -- the keys of the job being decided

local function corrupt(field, what)
  error({err = 'ANARCHON-CORRUPT key ' .. runs .. ' field ' .. field .. ': ' .. what})
end

local function decode(raw, field)
  local status, attempt, claimed, lease, keep, finished, token, n, rest = string.match(raw, RUN)
  local size = tonumber(n)
  -- only a skip record has attempt 0 and no lease
  local skipped = status == 'skipped'
  if not status or not STATUS[status] or size > #rest
     or tonumber(attempt) < (skipped and 0 or 1) or (lease == '-') ~= skipped
     or (finished ~= '-' and not string.match(finished, '^%d+$')) then
    corrupt(field, 'not a run anarchon writes (status attempt claimed_at lease_until keep_until '
      .. 'finished_at token holder)')
  end
  local tail = string.sub(rest, size + 1)
  if tail ~= '' and string.sub(tail, 1, 1) ~= '|' then
    corrupt(field, 'text after the holder is not an error')
  end
  return {status = status, attempt = attempt, claimed = claimed, lease = lease, keep = keep,
    finished = finished, token = token, holder = string.sub(rest, 1, size), tail = tail}
end

-- A run's string from its fields (a new run's, without a table: the path of every win).
local function run_text(status, attempt, claimed, lease, keep, finished, token, holder, tail)
  return status .. ' ' .. attempt .. ' ' .. claimed .. ' ' .. lease .. ' ' .. keep .. ' '
    .. finished .. ' ' .. token .. ' ' .. #holder .. ' ' .. holder .. tail
end

local function encode(run)
  return run_text(run.status, run.attempt, run.claimed, run.lease, run.keep, run.finished,
    run.token, run.holder, run.tail)
end

local function index(field, run)
  if run.status == 'running' then
    redis.call('ZADD', leases, run.lease, field)
  else
    redis.call('ZREM', leases, field)
  end
end

local function save(field, run)
  redis.call('HSET', runs, field, encode(run))
  index(field, run)
end

local function event(field, what, attempt, token, holder, history_limit)
  redis.call('XADD', events, 'MAXLEN', '~', history_limit, '*', 'event', what, 'slot', field,
    'attempt', attempt, 'token', token, 'holder', holder)
end

-- L1 overlap: a slot of the job other than `field` that holds a live lease, or nil.
local function other_live(field)
  for _, other in ipairs(redis.call('ZRANGEBYSCORE', leases, now, '+inf')) do
    if other ~= field then
      local raw = redis.call('HGET', runs, other)
      if raw then
        local run = decode(raw, other)
        if run.status == 'running' and tonumber(run.lease) >= now then return other end
      end
    end
  end
  return nil
end

-- L11: beyond the newest history_limit runs, forget the oldest while they are past keep_until
-- and hold no live lease (at most SWEEP_MAX per claim); the floor rises to the newest forgotten.
local function sweep(excess, floor)
  local gone = {}
  for _, field in ipairs(redis.call('ZRANGE', slots, 0, excess - 1)) do
    local raw = redis.call('HGET', runs, field)
    if raw then
      local run = decode(raw, field)
      if tonumber(run.keep) >= now or (run.status == 'running' and tonumber(run.lease) >= now)
      then break end
    end
    gone[#gone + 1] = field
  end
  if #gone == 0 then return end
  redis.call('HDEL', runs, unpack(gone))
  redis.call('ZREM', slots, unpack(gone))
  redis.call('ZREM', leases, unpack(gone))
  local last = gone[#gone]
  local count = redis.call('ZCARD', slots)
  if not floor or tonumber(last) > tonumber(floor) then
    redis.call('HSET', runs, 'n', count, 'floor', last)
  else
    redis.call('HSET', runs, 'n', count)
  end
end

local function answer(outcome, run, floor, mine)
  if run.status == 'skipped' then -- S1: the recorded reason, token and holder, always
    return 'skipped ' .. run.attempt .. ' - skipped ' .. now_s .. ' ' .. (floor or '-') .. ' '
      .. run.token .. ' ' .. word(string.sub(run.tail, 2)) .. ' ' .. escaped(run.holder)
  end
  local head = outcome .. ' ' .. run.attempt .. ' ' .. run.lease .. ' ' .. run.status .. ' '
    .. now_s .. ' ' .. (floor or '-')
  if mine then return head end
  return head .. ' ' .. run.token .. ' ' .. escaped(run.holder)
end

-- The last `count` characters (UTF-8) of `text`, as Python's text[-count:].
local function last_chars(text, count)
  if #text <= count then return text end
  local i, seen = #text, 0
  while i > 0 do
    local byte = string.byte(text, i)
    if byte < 0x80 or byte >= 0xC0 then
      seen = seen + 1
      if seen == count then return string.sub(text, i) end
    end
    i = i - 1
  end
  return text
end

-- L12: the run's tail ('|' and its error, the try log) with `entry` appended.
local function append_try(tail, entry)
  local log = string.sub(tail, 2)
  if log ~= '' then entry = log .. TRY_SEPARATOR .. entry end
  return '|' .. last_chars(entry, MAX_TRY_LOG_CHARS)
end

local function claim(first, request, limit)
  runs, slots, leases, events = KEYS[first + 1], KEYS[first + 2], KEYS[first + 3], KEYS[first + 4]
  pause = KEYS[first + 5]
  local field, token, lease_ms, late_ms, skip, attempts, keep, m, rest = string.match(request,
    CLAIM)
  if not field then error('ANARCHON malformed claim arguments') end
  m = tonumber(m)
  if m > #rest then error('ANARCHON malformed claim arguments') end
  local skip_reason, instance = m > 0 and string.sub(rest, 1, m), string.sub(rest, m + 1)
  local got = redis.call('HMGET', runs, field, 'floor', 'n')
  local raw, floor, n = got[1], got[2], got[3]
  if floor and not string.match(floor, '^%d+$') then
    corrupt('floor', 'not a slot in epoch milliseconds')
  end
  if not raw then -- L1
    local slot = tonumber(field)
    if floor and slot <= tonumber(floor) then -- forgotten: its run may have happened
      return 'late 0 - - ' .. now_s .. ' ' .. (floor or '-')
    end
    -- S1: a slot decided not to run is recorded skipped, with the reason texts of
    -- anarchon.backend (late_reason, overlap_reason), the job's pause (P1, whatever the
    -- request says) or the caller's own
    local reason
    if now - slot > tonumber(late_ms) then
      reason = 'late: slot is ' .. string.format('%d', now - slot) .. ' ms old, max_late is '
        .. late_ms .. ' ms'
    else
      reason = paused(pause, now) or skip_reason
      if not reason and skip == '1' then
        local holding = other_live(field)
        if holding then
          reason = 'overlap: slot ' .. holding .. " of this job holds a live lease and overlap "
            .. "is 'skip'"
        end
      end
    end
    if not n then
      n = redis.call('ZCARD', slots)
    elseif string.match(n, '^%d+$') then
      n = tonumber(n)
    else
      corrupt('n', 'not a count of runs')
    end
    n = n + redis.call('ZADD', slots, field, field)
    if reason then
      local run = {status = 'skipped', attempt = '0', claimed = now_s, lease = '-', keep = keep,
        finished = now_s, token = token, holder = instance, tail = '|' .. reason}
      redis.call('HSET', runs, field, encode(run), 'n', n)
      event(field, 'skipped', '0', token, instance, limit)
      if n > limit then sweep(math.min(n - limit, SWEEP_MAX), floor) end
      return answer('skipped', run, floor, true)
    end
    local lease = string.format('%d', now + tonumber(lease_ms))
    redis.call('HSET', runs, field,
      run_text('running', '1', now_s, lease, keep, '-', token, instance, ''), 'n', n)
    redis.call('ZADD', leases, lease, field)
    event(field, 'won', '1', token, instance, limit)
    if n > limit then sweep(math.min(n - limit, SWEEP_MAX), floor) end
    return 'won 1 ' .. lease .. ' running ' .. now_s .. ' ' .. (floor or '-')
  end
  local run = decode(raw, field)
  local mine = run.token == token and run.holder == instance
  if run.status ~= 'running' then return answer('done', run, floor, mine) end -- L6
  if run.token == token then return answer('won', run, floor, mine) end -- L2
  if tonumber(run.lease) >= now then return answer('running', run, floor, false) end -- L3
  local attempt = tonumber(run.attempt)
  if attempt < tonumber(attempts) then -- L4
    run.attempt, run.token, run.holder = tostring(attempt + 1), token, instance
    run.claimed, run.lease = now_s, string.format('%d', now + tonumber(lease_ms))
    save(field, run)
    event(field, 'won', run.attempt, run.token, run.holder, limit)
    return answer('won', run, floor, true)
  end
  run.status, run.finished = 'interrupted', now_s -- L5
  -- L5's entry, appended to the try log of a retried run (L12), which stays.
  run.tail = append_try(run.tail, 'lease of attempt ' .. run.attempt .. ' ran out with no attempts left')
  save(field, run)
  event(field, 'interrupted', run.attempt, run.token, run.holder, limit)
  return answer('interrupted', run, floor, false)
end

local function update()
  local field, token = ARGV[2], ARGV[3]
  local raw = redis.call('HGET', runs, field)
  if not raw then return 0 end
  local run = decode(raw, field)
  if run.token ~= token then return 0 end
  if run.status ~= 'running' then -- C2: a resent finish of the same status changes nothing
    return (op == 'finish' and run.status == ARGV[4]) and 1 or 0
  end
  if op == 'renew' then
    run.lease = string.format('%d', now + tonumber(ARGV[4]))
  elseif op == 'release' then
    run.lease = string.format('%d', now - 1)
  elseif op == 'retry' then
    local entry = ARGV[4]
    if #run.tail <= #entry or string.sub(run.tail, -#entry) ~= entry then
      run.tail = append_try(run.tail, entry)
    end
    run.lease = string.format('%d', now + tonumber(ARGV[5]))
  else
    run.status, run.finished = ARGV[4], now_s
    if ARGV[5] == '1' then run.tail = append_try(run.tail, ARGV[6]) end
    event(field, ARGV[4], run.attempt, run.token, run.holder, ARGV[7])
  end
  save(field, run)
  return 1
end

-- One call: claims of one job or many, or a renew, finish, release or retry. The store calls it as a
-- Redis function (FCALL) where the server has them, else as a script ('return lease()').
local function lease()
  op = ARGV[1]
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  now_s = string.format('%d', now)
  if op == 'renew' or op == 'finish' or op == 'release' or op == 'retry' then
    runs, slots, leases, events = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
    return update()
  end
  return each_job(5, claim)
end
