-- anarchon script strategy: for each job, look for the slot among the claims of the last window,
-- append the claim if there is none, and answer who holds the slot.
-- For one job or many (batch.lua): KEYS = each job's claim stream and pause hash; ARGV[1] = 'claim
-- <window_ms>', ARGV[1 + i] = job i's "<slot> <token> <max_late_ms> <m> <skip_reason><holder>"
-- (m: the length of the skip reason in bytes, 0 for a claim; a skip's entry has the field skip).
-- Each job's answer: "<state> <now>[ <token> <holder>]" with state
--   added (the claim was appended: won, or skipped for a skip) | mine (found, with the caller's
--   token) | found (with another token, given with its holder) | skipped (found, a skip: "skipped
--   <now> <token> <holder> <reason>", see found_answer) | late | forgotten | early (C5, below)
--
-- C5: a claim is found by the scan for one window after it is appended. A claim appended more
-- than window - max_late ms before its slot could be missed by a claim of the slot still in
-- time, which would append a second one: it is refused, with nothing written.
-- A skip (S1) is appended also for a slot older than max_late (within the window): it lets
-- nobody run the slot, and records why it did not run; only a claim is refused as late.
-- P1: a claim of a paused job's slot that no entry holds yet appends a skip with the pause's
-- reason (paused() in batch.lua), whatever the request says, and answers it as found:
-- "skipped <now> <token> <holder> <reason>".
--
-- Each entry also carries `max`, the greatest slot in the stream when it was appended (its own
-- included), so the scan, newest first, stops at the first entry whose max is below the slot:
-- no entry at or below it can hold the slot. A job whose slots are claimed in order, as the
-- scheduler claims them, reads one or two entries per claim instead of the whole window.
local PAGES = {1, 16, 128}
local now, now_s -- of the call being served: set by window()

local function claim(first, request, window)
  local key, pause = KEYS[first + 1], KEYS[first + 2]
  local field, token, max_late, rest = string.match(request, '^(%d+) (%x+) (%d+) (.*)$')
  if not field then error('ANARCHON malformed claim arguments') end
  local skip, holder = reason_holder(rest)
  local slot = tonumber(field)
  if slot - now > window - tonumber(max_late) then return 'early ' .. now_s end
  -- A claim of this slot was appended no earlier than one window before the slot (C5 above
  -- refuses earlier ones) and no later than one window after it (older slots are refused);
  -- so every entry older than start holds a smaller slot.
  local start = math.max(math.min(now, slot) - window, 0)
  local from, page, highest, below, newest = '+', 0, slot, false, nil
  while not below do
    page = math.min(page + 1, #PAGES)
    local entries = redis.call('XREVRANGE', key, from, start, 'COUNT', PAGES[page])
    newest = newest or (entries[1] and entries[1][1])
    for _, entry in ipairs(entries) do
      local found, found_token, found_holder, most, found_skip = claim_fields(key, entry)
      if found == field then
        return found_answer(token, found_token, found_holder, found_skip, now_s)
      end
      local top = tonumber(most or found)
      if top > highest then highest = top end
      if most and top < slot then below = true break end
    end
    if #entries < PAGES[page] then break end
    from = '(' .. entries[#entries][1]
  end
  if now - slot > window then return 'forgotten ' .. now_s end
  if not skip and now - slot > tonumber(max_late) then return 'late ' .. now_s end
  local held = paused(pause, now)
  if held then skip = held end
  local most = string.format('%d', highest)
  -- Entries older than two windows are trimmed once per window (by the first claim appended in
  -- a window of time later than the newest entry's), not on every append: a trim costs an
  -- append about as much again. The stream so holds at most about three windows of claims.
  local appended = newest and tonumber(string.match(newest, '^%d+'))
  local fresh = appended and math.floor(appended / window) == math.floor(now / window)
  if skip then -- rare: the arguments as a list, the trim in it or not
    local args = {'XADD', key, 'MINID', '~', math.max(now - 2 * window, 0), '*', 'slot', field,
      'token', token, 'holder', holder, 'max', most, 'skip', skip}
    if fresh then table.remove(args, 5) table.remove(args, 4) table.remove(args, 3) end
    redis.call(unpack(args))
  elseif fresh then
    redis.call('XADD', key, '*', 'slot', field, 'token', token, 'holder', holder, 'max', most)
  else
    redis.call('XADD', key, 'MINID', '~', math.max(now - 2 * window, 0), '*',
      'slot', field, 'token', token, 'holder', holder, 'max', most)
  end
  if held then return found_answer(token, token, holder, held, now_s) end
  return 'added ' .. now_s
end

-- One call. The store calls it as a Redis function (FCALL) where the server has them, else as
-- a script ('return window()').
local function window()
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  now_s = string.format('%d', now)
  return each_job(2, claim)
end
