-- anarchon idmp strategy (Redis 8.6+): XADD ... IDMP <job> <slot> * for each job, and the
-- entry Redis answers read back at once, in the same call.
-- For one job or many (batch.lua): KEYS = each job's claim stream; ARGV[1] = 'claim <maxlen>',
-- ARGV[1 + i] = job i's "<job> <slot> <token> <ahead> <m> <skip_reason><holder>" (the job is
-- the IDMP producer id; m: the length of the skip reason in bytes, 0 for a claim; ahead: how
-- far before its slot, in ms, the claim may be written, possibly negative, see below).
-- A duplicate XADD answers the first entry's ID with no flag, so every claim compares tokens.
-- Each job's answer: "<state>[ <token> <holder>]" with state
--   mine (the entry holds the caller's token: won, or skipped for the caller's skip) | found
--   (another token, given with its holder) | skipped (the entry is a skip, S1: "skipped <token>
--   <holder> <reason>", see found_answer) | trimmed (Redis still knows the slot, its entry is
--   gone: lost) | gone (no stream: NOMKSTREAM refused to create one with Redis' default IDMP
--   settings) | early <now> (nothing written: C5, see below)
-- C5: Redis remembers an IDMP id for IDMP-DURATION from when it is written; a claim written
-- more than `ahead` ms before its slot would be forgotten while the slot can still be claimed,
-- so it is refused, judged by Redis TIME (the clock lateness is judged by).
local now, now_s -- of the call being served: set by idmp()

local function claim(first, request, maxlen)
  local key = KEYS[first + 1]
  local job, slot, token, ahead, rest = string.match(request,
    '^(%S+) (%d+) (%x+) (%-?%d+) (.*)$')
  if not job then error('ANARCHON malformed claim arguments') end
  local skip, holder = reason_holder(rest)
  if tonumber(slot) - now > tonumber(ahead) then return 'early ' .. now_s end
  local id
  if skip then
    id = redis.call('XADD', key, 'NOMKSTREAM', 'IDMP', job, slot, 'MAXLEN', '=', maxlen,
      '*', 'slot', slot, 'token', token, 'holder', holder, 'skip', skip)
  else
    id = redis.call('XADD', key, 'NOMKSTREAM', 'IDMP', job, slot, 'MAXLEN', '=', maxlen,
      '*', 'slot', slot, 'token', token, 'holder', holder)
  end
  if not id then return 'gone' end
  return entry_answer(key, id, token, 'trimmed')
end

-- One call. The store calls it as a Redis function (FCALL) where the server has them, else as
-- a script ('return idmp()').
local function idmp()
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  now_s = string.format('%d', now)
  return each_job(1, claim)
end
