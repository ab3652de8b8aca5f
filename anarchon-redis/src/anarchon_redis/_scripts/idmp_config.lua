-- anarchon idmp strategy: choose the job stream's IDMP settings once, atomically.
-- KEYS: claims stream, config marker (string "duration maxsize").
-- ARGV: duration_sec, maxsize. Reply: the settings in force, "duration maxsize".
-- XCFGSET wipes the remembered ids whenever a value changes, so it runs only on a stream that
-- has no chosen settings yet and tracks no ids; otherwise the settings in force are returned and
-- the caller refuses to start when they differ from its own.
local claims, marker = KEYS[1], KEYS[2]
local chosen = redis.call('GET', marker)
local exists = redis.call('EXISTS', claims) == 1
if chosen and exists then return chosen end
local wanted = chosen or (ARGV[1] .. ' ' .. ARGV[2])
if not exists then
  -- a new stream (or one that vanished: it gets back the settings chosen before)
  redis.call('XADD', claims, 'MAXLEN', 0, '*', 'slot', 0, 'token', '', 'holder', '')
else
  local info = redis.call('XINFO', 'STREAM', claims)
  local values = {}
  for i = 1, #info, 2 do values[info[i]] = info[i + 1] end
  local current = tostring(values['idmp-duration']) .. ' ' .. tostring(values['idmp-maxsize'])
  if current ~= wanted and tonumber(values['iids-tracked']) ~= 0 then return current end
end
local duration, maxsize = string.match(wanted, '^(%d+) (%d+)$')
redis.call('XCFGSET', claims, 'IDMP-DURATION', duration, 'IDMP-MAXSIZE', maxsize)
redis.call('SET', marker, wanted)
return wanted
