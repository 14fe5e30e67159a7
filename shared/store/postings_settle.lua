-- A write's claims settled once its chunks' statement ran (postings.py, settle), or a
-- claim left unsettled by a writer that died, once the graph was read (compaction.py,
-- reconcile): a chunk written keeps its number; one not written (its memory was deleted
-- meanwhile) is forgotten by the stems kept with its number. Only a claim still unsettled
-- and still the chunk's: one that another writer took over, or a delete forgot, is theirs.
-- KEYS: the namespace's postings keys, in postings.KEYS's order
-- ARGV: per chunk its id, its number, 1 if its chunk was written (0: not)
-- Returns how many were forgotten.
local seqof, df, words, dead, pend, junk, stats = KEYS[1], KEYS[2], KEYS[4], KEYS[5],
  KEYS[6], KEYS[9], KEYS[10]
local counts, gone, dropped = {}, 0, 0
for i = 1, #ARGV, 3 do
  local id, number, written = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local held = redis.call('HGET', pend, number)
  if held and redis.call('HGET', seqof, id) == number then
    redis.call('HDEL', pend, number)
    if written == '0' then
      local length, stems = string.match(held, '^(%d+) ?(.*)$')
      redis.call('HDEL', seqof, id)
      redis.call('SETBIT', dead, number, 1)
      redis.call('DECRBY', words, length)
      for stem in string.gmatch(stems, '%S+') do
        counts[stem] = (counts[stem] or 0) + 1
        dropped = dropped + 1
      end
      gone = gone + 1
    end
  end
end
for stem, by in pairs(counts) do
  if redis.call('HINCRBY', df, stem, -by) <= 0 then redis.call('HDEL', df, stem) end
  redis.call('HINCRBY', junk, stem, by)
end
if gone > 0 then
  redis.call('HINCRBY', stats, 'live', -dropped)
  redis.call('HINCRBY', stats, 'junk', dropped)
  redis.call('HINCRBY', stats, 'dead', gone)
end
return gone
