-- A write's postings appended (postings.py, write_postings): one string of records a stem.
-- KEYS: each stem's postings
-- ARGV: the bytes each gets, in the same order
-- Returns how many keys were appended to.
for i = 1, #KEYS do redis.call('APPEND', KEYS[i], ARGV[i]) end
return #KEYS
