-- anarchon script strategy: look for the slot among the claims of the last window, append the
-- claim if there is none, and answer the token that holds the slot.
-- KEYS[1]: the job's claim stream. ARGV: slot, token, holder, window_ms, max_late_ms
-- Reply: {state, token, holder, entry id, now} with state found | added | late | forgotten.
local key = KEYS[1]
local field, token, holder = ARGV[1], ARGV[2], ARGV[3]
local slot, window, max_late = tonumber(ARGV[1]), tonumber(ARGV[4]), tonumber(ARGV[5])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- A claim of this slot was appended no earlier than one window before the slot (clock skew is
-- smaller than the window) and no later than one window after it (older slots are refused).
local start = math.max(math.min(now, slot) - window, 0)
for _, entry in ipairs(redis.call('XREVRANGE', key, '+', start)) do
  local values = entry[2]
  local found_slot, found_token, found_holder = nil, nil, nil
  for i = 1, #values, 2 do
    local name = values[i]
    if name == 'slot' then found_slot = values[i + 1]
    elseif name == 'token' then found_token = values[i + 1]
    elseif name == 'holder' then found_holder = values[i + 1] end
  end
  if not found_slot or not tonumber(found_slot) or not found_token then
    error({err = 'ANARCHON-CORRUPT key ' .. key .. ' entry ' .. entry[1] ..
      ': not a claim (fields slot and token expected)'})
  end
  if found_slot == field then return {'found', found_token, found_holder or '', entry[1], now} end
end
if now - slot > window then return {'forgotten', false, false, false, now} end
if now - slot > max_late then return {'late', false, false, false, now} end
local id = redis.call('XADD', key, 'MINID', '~', math.max(now - 2 * window, 0), '*',
  'slot', field, 'token', token, 'holder', holder)
return {'added', token, holder, id, now}
