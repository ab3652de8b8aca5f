-- anarchon: the fleet's member list (rule M1) on Redis TIME. Every instance announces itself
-- every few seconds; the member list is read with plain reads (TIME, HGETALL), never a script.
--
-- KEYS[1] = the prefix's members ({prefix:}:members, a hash: instance -> "<started> <seen>
-- <until> <stats>", epoch ms and the stats as JSON), KEYS[2] = when each ends
-- ({prefix:}:member-ends, a sorted set: instance scored by its until), so ended members are
-- found without reading them all.
--
-- announce: ARGV = 'announce', instance, ttl_ms, stats (JSON). The member's started is kept while
-- it is live (its old until >= now), else it is now (it joins again; a value anarchon did not
-- write counts as no member). Members that ended are removed, at most 100 per call.
-- Reply: "<started> <seen> <until>".
--
-- leave: ARGV = 'leave', instance. Removes the member. Reply: 1 if it was live, else 0.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op, instance = ARGV[1], ARGV[2]

local function ends(value)
  if not value then return nil, nil end
  local started, until_ms = string.match(value, '^(%d+) %d+ (%d+) ')
  if not started then return nil, nil end
  return tonumber(started), tonumber(until_ms)
end

if op == 'leave' then
  local _, until_ms = ends(redis.call('HGET', KEYS[1], instance))
  redis.call('HDEL', KEYS[1], instance)
  redis.call('ZREM', KEYS[2], instance)
  if until_ms and until_ms >= now then return 1 end
  return 0
end
if op ~= 'announce' then return redis.error_reply('ANARCHON malformed call: ' .. tostring(op)) end

local old_started, old_until = ends(redis.call('HGET', KEYS[1], instance))
local started = now
if old_started and old_until >= now and old_started <= now then started = old_started end
local until_ms = now + tonumber(ARGV[3])
local head = string.format('%d %d %d', started, now, until_ms)
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.format('%d', now),
  'LIMIT', 0, 100)
if #gone > 0 then
  redis.call('HDEL', KEYS[1], unpack(gone))
  redis.call('ZREM', KEYS[2], unpack(gone))
end
redis.call('HSET', KEYS[1], instance, head .. ' ' .. ARGV[4])
redis.call('ZADD', KEYS[2], string.format('%d', until_ms), instance)
return head
