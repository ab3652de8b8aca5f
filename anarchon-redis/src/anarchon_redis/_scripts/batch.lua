-- anarchon: what the claim scripts share; the store puts it in front of each of them.
--
-- A claim script decides one job or many in one call: KEYS holds the same number of keys for
-- each job, ARGV[1] is 'claim <number>' (a store option the script needs) and ARGV[1 + i] is job
-- i's request. A call with many jobs touches several hash slots, so it is for a standalone
-- Redis, which is what the store connects to. The reply is one answer per job, '\n' between
-- them; text that may hold anything (a holder) is written with '%' as %25 and newlines as %0A.
-- A job whose keys hold data anarchon did not write answers "error <message>" (escaped the same
-- way), and the other jobs are still decided.
-- Text that must stay one word of an answer (a skip's reason) also has its spaces as %20.
local ESCAPE = {['%'] = '%25', ['\n'] = '%0A', [' '] = '%20'}

local function escaped(text)
  if string.find(text, '[\n%%]') then return (string.gsub(text, '[\n%%]', ESCAPE)) end
  return text
end

local function word(text)
  if string.find(text, '[\n%% ]') then return (string.gsub(text, '[\n%% ]', ESCAPE)) end
  return text
end

-- A request's "<m> <skip_reason><holder>", which ends each no-lease claim request: m is the
-- length of the caller's skip reason in bytes (0: none). Returns (skip reason or nil, holder).
local function reason_holder(text)
  local m, rest = string.match(text, '^(%d+) (.*)$')
  m = tonumber(m)
  if not m or m > #rest then error('ANARCHON malformed claim arguments') end
  if m == 0 then return nil, rest end
  return string.sub(rest, 1, m), string.sub(rest, m + 1)
end

-- P1: the skip reason of the job's pause in force at `now` ('paused', or 'paused: <reason>'),
-- or nil when it has none. `key` is the job's pause hash ({prefix:job}:pause, fields since,
-- until (epoch ms, or '-' until resumed), reason, by), read only for a slot with no run yet.
local function paused(key, now)
  local got = redis.call('HMGET', key, 'until', 'reason')
  local ends, reason = got[1], got[2]
  if not ends then return nil end
  if ends ~= '-' then
    if not string.match(ends, '^%d+$') then
      error({err = 'ANARCHON-CORRUPT key ' .. key .. ' field until: not epoch milliseconds '
        .. 'nor -'})
    end
    if now >= tonumber(ends) then return nil end
  end
  if reason and reason ~= '' then return 'paused: ' .. reason end
  return 'paused'
end

-- (slot, token, holder, max or nil, skip or nil) of an entry of a claim stream: fields slot,
-- token, holder, in the script strategy's entries max, and in a skip's entry (S1) skip, the
-- reason the slot is not to run
local function claim_fields(key, entry)
  local v = entry[2]
  local slot, token, holder, most, skip
  if v[1] == 'slot' and v[3] == 'token' and v[5] == 'holder' and (#v == 6 or
      (#v == 8 and v[7] == 'max')) then
    slot, token, holder, most = v[2], v[4], v[6], v[8]
  else
    holder = ''
    for i = 1, #v, 2 do
      local name = v[i]
      if name == 'slot' then slot = v[i + 1]
      elseif name == 'token' then token = v[i + 1]
      elseif name == 'holder' then holder = v[i + 1]
      elseif name == 'max' then most = v[i + 1]
      elseif name == 'skip' then skip = v[i + 1] end
    end
  end
  if not slot or not string.match(slot, '^%d+$') or not token
     or (most and not string.match(most, '^%d+$')) then
    error({err = 'ANARCHON-CORRUPT key ' .. key .. ' entry ' .. entry[1]
      .. ': not a claim (fields slot, token and holder expected)'})
  end
  return slot, token, holder, most, skip
end

-- The answer for a claim entry found for the slot, to a claim with `token`: skipped (a skip's
-- entry: its token, holder as one word, and reason), mine (it holds `token`), or found (another
-- token, given with its holder). `now_s`, if given, follows the state word.
local function found_answer(token, found_token, found_holder, skip, now_s)
  local at = now_s and (' ' .. now_s) or ''
  if skip then
    return 'skipped' .. at .. ' ' .. found_token .. ' ' .. word(found_holder) .. ' '
      .. escaped(skip)
  end
  if found_token == token then return 'mine' .. at end
  return 'found' .. at .. ' ' .. found_token .. ' ' .. escaped(found_holder)
end

-- The answer (found_answer) for the claim entry `id` of the stream `key`, or `absent` when the
-- stream has no such entry.
local function entry_answer(key, id, token, absent)
  local entry = redis.call('XRANGE', key, id, id)[1]
  if not entry then return absent end
  local _, found_token, found_holder, _, skip = claim_fields(key, entry)
  return found_answer(token, found_token, found_holder, skip)
end

-- The answers of claim(first, request, option) for each job: first is the index in KEYS of
-- the job's first key, minus one.
local function each_job(keys_per_job, claim)
  local option = string.match(ARGV[1], '^claim (%d+)$')
  if not option or #KEYS ~= keys_per_job * (#ARGV - 1) then
    return redis.error_reply('ANARCHON malformed call: ' .. tostring(ARGV[1]))
  end
  option = tonumber(option)
  local answers = {}
  for i = 2, #ARGV do
    local ok, result = pcall(claim, (i - 2) * keys_per_job, ARGV[i], option)
    if not ok then
      local message = type(result) == 'table' and tostring(result.err) or tostring(result)
      result = 'error ' .. escaped(message)
    end
    answers[i - 1] = result
  end
  return table.concat(answers, '\n')
end

