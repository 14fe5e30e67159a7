-- A write's postings appended (postings.py, write_postings): one string of records a stem,
-- only while every chunk of the write still has the number its records carry (a number
-- forgotten since it was given may be freed and given again: no record of it may follow).
-- KEYS[1]: seqof; KEYS[2]: junk; KEYS[3]: stats; then each stem's postings
-- ARGV[1]: how many chunks, n; then per chunk its id and its number; then how many stems
--   get records they hold already (a write that ran again), m; then per such stem its
--   position among the stems (from 1), its name and how many; then the bytes each stem
--   gets, in KEYS' order
-- Returns {1} when appended, or {0, i, ...}: the positions (from 1) of the chunks whose
--   number is no longer theirs (nothing was appended; the writer leaves them out).
local seqof, junk, stats = KEYS[1], KEYS[2], KEYS[3]
local chunks = tonumber(ARGV[1])
local lost = {0}
for i = 1, chunks do
  if redis.call('HGET', seqof, ARGV[2 * i]) ~= ARGV[2 * i + 1] then lost[#lost + 1] = i end
end
if #lost > 1 then return lost end
local at = 2 * chunks + 2
local repeats, repeated = tonumber(ARGV[at]), 0
for r = 1, repeats do
  local again = tonumber(ARGV[at + 3 * r])
  redis.call('HINCRBY', junk, ARGV[at + 3 * r - 1], again)
  repeated = repeated + again
end
if repeated > 0 then redis.call('HINCRBY', stats, 'junk', repeated) end
at = at + 3 * repeats
for k = 4, #KEYS do redis.call('APPEND', KEYS[k], ARGV[at + k - 3]) end
return {1}
