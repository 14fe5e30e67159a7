-- A lock given up by its holder only (compaction.py, postings.py's backfill): one that
-- expired and was taken by another is theirs.
-- KEYS[1]: the lock; ARGV[1]: the holder's token
-- Returns 1 when it was released.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
