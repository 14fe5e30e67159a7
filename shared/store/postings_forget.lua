-- Chunks about to be deleted (a delete, an undo: postings.py, forget), read from the graph
-- with their text: uncounted, their numbers marked dead (the reader skips them) and their
-- stems' postings counted as holding junk (the compaction removes it: compaction.py).
-- KEYS: the namespace's postings keys, in postings.KEYS's order
-- ARGV: per chunk its id, its length in words, its stems joined by spaces
-- Returns how many were numbered (a chunk forgotten before is not again).
local seqof, df, words, dead, pend, junk, stats = KEYS[1], KEYS[2], KEYS[4], KEYS[5],
  KEYS[6], KEYS[9], KEYS[10]
local counts, gone, dropped = {}, 0, 0
for i = 1, #ARGV, 3 do
  local id, length, stems = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local number = redis.call('HGET', seqof, id)
  if number then
    redis.call('HDEL', seqof, id)
    redis.call('HDEL', pend, number)
    redis.call('SETBIT', dead, number, 1)
    redis.call('DECRBY', words, length)
    for stem in string.gmatch(stems, '%S+') do
      counts[stem] = (counts[stem] or 0) + 1
      dropped = dropped + 1
    end
    gone = gone + 1
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
