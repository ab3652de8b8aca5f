-- anarchon: the control writes, pause (P1) and trigger (X1), on Redis TIME. Operators call them
-- now and then (anarchon pause, anarchon trigger); the claim scripts only read what they write.
--
-- pause: KEYS[1] = the job's pause hash ({prefix:job}:pause); ARGV = 'pause', until (epoch ms,
-- or '-' until resumed), reason, by. Replaces any pause of the job (all four fields are set).
-- Reply: the time it was written (now, epoch ms) as text.
--
-- resume: KEYS[1] = the job's pause hash; ARGV = 'resume'. Deletes the pause (its fields: HDEL,
-- which the documented ACL has). Reply: 1 if a pause was in force, else 0.
--
-- trigger: KEYS[1] = the prefix's trigger list ({prefix:}:triggers, a sorted set scored by the
-- time each trigger was written), KEYS[2] = the newest slot given to a trigger of each job
-- ({prefix:}:trigger-slots, a hash); ARGV = 'trigger', job, reason, by, keep_ms. The slot is
-- now, or the job's newest trigger slot + 1 if that is not before now (so each is new, even if
-- the clock steps back), moved on by 1 ms when on a whole second (scheduled slots are; an ad-hoc
-- one never is). The member is "<slot> <job> <n> <by><reason>" (n: the length of by in bytes).
-- Triggers written more than keep_ms ago are removed, at most 100 per call.
-- Reply: "<slot> <now>".
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_s = string.format('%d', now)
local op = ARGV[1]

if op == 'pause' then
  redis.call('HSET', KEYS[1], 'since', now_s, 'until', ARGV[2], 'reason', ARGV[3], 'by', ARGV[4])
  return now_s
end
if op == 'resume' then
  local ends = redis.call('HGET', KEYS[1], 'until')
  redis.call('HDEL', KEYS[1], 'since', 'until', 'reason', 'by')
  if not ends then return 0 end
  if string.match(ends, '^%d+$') and now >= tonumber(ends) then return 0 end
  return 1
end
if op ~= 'trigger' then return redis.error_reply('ANARCHON malformed call: ' .. tostring(op)) end

local job, reason, by, keep = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local slot = now
local last = redis.call('HGET', KEYS[2], job)
if last then
  if not string.match(last, '^%d+$') then
    error({err = 'ANARCHON-CORRUPT key ' .. KEYS[2] .. ' field ' .. job
      .. ': not a slot in epoch milliseconds'})
  end
  if tonumber(last) >= slot then slot = tonumber(last) + 1 end
end
if slot % 1000 == 0 then slot = slot + 1 end
local slot_s = string.format('%d', slot)
redis.call('HSET', KEYS[2], job, slot_s)
redis.call('ZADD', KEYS[1], now_s, slot_s .. ' ' .. job .. ' ' .. #by .. ' ' .. by .. reason)
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now - keep),
  'LIMIT', 0, 100)
if #old > 0 then redis.call('ZREM', KEYS[1], unpack(old)) end
return slot_s .. ' ' .. now_s
