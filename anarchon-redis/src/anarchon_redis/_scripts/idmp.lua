-- anarchon idmp strategy (Redis 8.6+): XADD ... IDMP <job> <slot> * for each job, and the
-- entry Redis answers read back at once, in the same call.
-- For one job or many (batch.lua): KEYS = each job's claim stream; ARGV[1] = 'claim <maxlen>',
-- ARGV[1 + i] = job i's "<job> <slot> <token> <holder>" (the job is the IDMP producer id).
-- A duplicate XADD answers the first entry's ID with no flag, so every claim compares tokens.
-- Each job's answer: "<state>[ <token> <holder>]" with state
--   mine (the entry holds the caller's token: won) | found (another token, given with its
--   holder) | trimmed (Redis still knows the slot, its entry is gone: lost) | gone (no stream:
--   NOMKSTREAM refused to create one with Redis' default IDMP settings)
local function claim(first, request, maxlen)
  local key = KEYS[first + 1]
  local job, slot, token, holder = string.match(request, '^(%S+) (%d+) (%x+) (.*)$')
  if not job then error('ANARCHON malformed claim arguments') end
  local id = redis.call('XADD', key, 'NOMKSTREAM', 'IDMP', job, slot, 'MAXLEN', '=', maxlen,
    '*', 'slot', slot, 'token', token, 'holder', holder)
  if not id then return 'gone' end
  return entry_answer(key, id, token, 'trimmed')
end

-- One call. The store calls it as a Redis function (FCALL) where the server has them, else as
-- a script ('return idmp()').
local function idmp()
  return each_job(1, claim)
end
