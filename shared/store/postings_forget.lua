-- Chunks forgotten: uncounted, their numbers marked dead (the reader skips them) and their
-- stems' postings counted as holding junk (the compaction removes it: compaction.py).
-- ARGV[1] says whose:
--   'read': chunks about to be deleted (a delete, an undo: postings.py, forget), with the
--     text the delete read; then per chunk its id, its length in words, its stems joined
--     by spaces. A chunk forgotten before is not again.
--   'settle': a write's claims once its chunks' statement ran (postings.py, settle), or
--     claims a writer that died left, once the graph was read (compaction.py, reconcile);
--     then per chunk its id, its number, and 1 if its chunk was written (0: not). A chunk
--     written keeps its number; one not written (its memory was deleted meanwhile) is
--     forgotten by the stems kept with its number. Only a claim still unsettled and still
--     the chunk's: one another writer took over, or a delete forgot, is theirs.
-- KEYS: the namespace's postings keys, in postings.KEYS's order
-- Returns how many were forgotten.
local seqof, df, words, dead, pend, junk, stats = KEYS[1], KEYS[2], KEYS[4], KEYS[5],
  KEYS[6], KEYS[9], KEYS[10]
local read = ARGV[1] == 'read'
local counts, gone, dropped = {}, 0, 0
for i = 2, #ARGV, 3 do
  local id, number, length, stems = ARGV[i], nil, nil, nil
  if read then
    number, length, stems = redis.call('HGET', seqof, id), ARGV[i + 1], ARGV[i + 2]
    if number then redis.call('HDEL', pend, number) end
  else
    local held = redis.call('HGET', pend, ARGV[i + 1])
    if held and redis.call('HGET', seqof, id) == ARGV[i + 1] then
      redis.call('HDEL', pend, ARGV[i + 1])
      if ARGV[i + 2] == '0' then
        number = ARGV[i + 1]
        length, stems = string.match(held, '^(%d+) ?(.*)$')
      end
    end
  end
  if number then
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
