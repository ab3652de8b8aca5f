-- anarchon stream-id strategy, claim_many only: the single claim is a plain XADD (no script).
-- This makes the same XADD for each job of a batch in one call, and reads back the entry of
-- each refused one as the single claim does, so the answers are those of claiming one by one.
-- For many jobs (batch.lua): KEYS = each job's claim stream; ARGV[1] = 'claim <maxlen>',
-- ARGV[1 + i] = job i's "<slot> <token> <m> <skip_reason><holder>" (m: the length of the skip
-- reason in bytes, 0 for a claim; a skip's entry has the field skip, S1).
-- Each job's answer: "<state>[ <token> <holder>]" with state
--   added (stored: won, or skipped for a skip) | mine (refused, the entry holds the caller's
--   token) | found (refused, another token, given with its holder) | skipped (refused, the entry
--   is a skip: "skipped <token> <holder> <reason>", see found_answer) | late (refused, no entry:
--   a newer slot was claimed first, or the entry was trimmed)
local REFUSED = 'equal or smaller than the target stream top item'

local function claim(first, request, maxlen)
  local key = KEYS[first + 1]
  local slot, token, rest = string.match(request, '^(%d+) (%x+) (.*)$')
  if not slot then error('ANARCHON malformed claim arguments') end
  local skip, holder = reason_holder(rest)
  local id = slot .. '-0'
  local added
  if skip then
    added = redis.pcall('XADD', key, 'MAXLEN', '=', maxlen, id,
      'slot', slot, 'token', token, 'holder', holder, 'skip', skip)
  else
    added = redis.pcall('XADD', key, 'MAXLEN', '=', maxlen, id,
      'slot', slot, 'token', token, 'holder', holder)
  end
  if type(added) ~= 'table' or not added.err then return 'added' end
  if not string.find(added.err, REFUSED, 1, true) then error(added) end
  return entry_answer(key, id, token, 'late')
end

return each_job(1, claim)
