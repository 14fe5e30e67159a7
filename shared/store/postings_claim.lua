-- Number the chunks a worker is about to write and count them (postings.py, write_postings).
-- KEYS: the namespace's postings keys, in postings.KEYS's order
-- ARGV[1]: bytes a chunk id takes in the id table; then per chunk: its id, its length in
--   words, its stems joined by spaces (a stem has none)
-- Returns per chunk its number and 1 if it was numbered now (0: a chunk numbered before,
--   whose postings are appended again: duplicates, counted as junk by postings_append.lua).
-- A chunk keeps its number while it lives; a new one takes a number freed by the compaction
-- (compaction.py) or the next. A number given but not yet settled (pend: its writer has not
-- seen its chunk written) is taken over: forgotten by the stems kept with it and a new one
-- given, so two writers of one chunk never share a number one of them may forget. Document
-- frequencies change once a stem a script: the append-only file logs every command a script
-- runs.
local seqof, df, seq, words, dead, pend, chunks, free, junk, stats = KEYS[1], KEYS[2],
  KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local slot = tonumber(ARGV[1])
local counts, dirt, out, live, dropped, gone = {}, {}, {}, 0, 0, 0
local freed = redis.call('EXISTS', free) == 1

local function count(stems, by)
  local n = 0
  for stem in string.gmatch(stems, '%S+') do
    counts[stem] = (counts[stem] or 0) + by
    if by < 0 then dirt[stem] = (dirt[stem] or 0) + 1 end
    n = n + 1
  end
  return n
end

for i = 2, #ARGV, 3 do
  local id, length, stems = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local number = redis.call('HGET', seqof, id)
  if number then
    local held = redis.call('HGET', pend, number)
    if held then
      local was, its = string.match(held, '^(%d+) ?(.*)$')
      redis.call('DECRBY', words, was)
      dropped = dropped + count(its, -1)
      redis.call('HDEL', pend, number)
      redis.call('SETBIT', dead, number, 1)
      gone = gone + 1
      number = nil
    end
  end
  local new = 0
  if not number then
    number = freed and redis.call('LPOP', free)
    if not number then
      freed = false
      number = redis.call('INCR', seq)
    end
    redis.call('HSET', seqof, id, number)
    redis.call('HSET', pend, number, length .. ' ' .. stems)
    redis.call('INCRBY', words, length)
    live = live + count(stems, 1)
    redis.call('SETRANGE', chunks, number * slot, id .. string.rep('\0', slot - #id))
    new = 1
  end
  out[#out + 1] = tonumber(number)
  out[#out + 1] = new
end
for stem, by in pairs(counts) do
  if by ~= 0 and redis.call('HINCRBY', df, stem, by) <= 0 then redis.call('HDEL', df, stem) end
end
for stem, n in pairs(dirt) do redis.call('HINCRBY', junk, stem, n) end
redis.call('HINCRBY', stats, 'live', live - dropped)
if gone > 0 then
  redis.call('HINCRBY', stats, 'junk', dropped)
  redis.call('HINCRBY', stats, 'dead', gone)
end
return out
