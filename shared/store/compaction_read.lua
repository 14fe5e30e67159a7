-- Terms to compact, read together with the junk counted in each (compaction.py, rewrite):
-- in one script, so that the junk read is what the bytes read hold.
-- KEYS[1]: junk; then each stem's postings
-- ARGV: the stems, in KEYS' order
-- Returns {the junk of each stem, then the bytes of each}.
local out = {}
for i = 1, #ARGV do out[i] = redis.call('HGET', KEYS[1], ARGV[i]) or '0' end
for k = 2, #KEYS do out[#out + 1] = redis.call('GET', KEYS[k]) or '' end
return out
