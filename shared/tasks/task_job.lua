-- A task and its one job in one step (shared/tasks/queue.py, queue_task): the task's record
-- (written new, or, for a task taken over already, its fields set while it is queued), its
-- job's bytes (checked against the queue's limits, or only counted) and its job on arq's
-- queue. Whatever fails, all of it happened or none of it did: no task waits for a job that
-- is not there. Starts with tasks.LIB, capacity.LUA and arq_internals.ENQUEUE.
--
-- KEYS[1]  the task's record
-- ARGV[1]  task id          ARGV[2]  ttl              ARGV[3]  now (s)
-- ARGV[4]  '1': write a new record; '': the record exists and is queued (set the fields)
-- ARGV[5]  '1': refuse past the limits; '': count the bytes only
-- ARGV[6]  max bytes        ARGV[7]  max jobs
-- ARGV[8..13]  the job's six arq_enqueue arguments (queue, id, job, expiry ms, score ms, first)
-- ARGV[14] the job's payload bytes
-- ARGV[15...]  the record's field/value pairs
-- Returns {1} queued; {2} nothing to do (a new record that exists already, or a record no
-- longer queued); over_limits' {0 or -1, total bytes, jobs} refused. Nothing is written
-- unless it returns {1}.
local record, id, ttl, now = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local exists = redis.call('EXISTS', record) == 1
if ARGV[4] == '1' and exists then return {2} end
if ARGV[4] ~= '1' and redis.call('HGET', record, 'state') ~= 'queued' then return {2} end
if ARGV[5] == '1' then
  local over = over_limits(ARGV[8], ARGV[14], held(ARGV[9]) == 0, ARGV[6], ARGV[7])
  if over then return over end
end
if not arq_enqueue(ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[13]) then
  return {2}
end
if held(ARGV[9]) == 0 then hold(ARGV[9], ARGV[14]) end
if #ARGV >= 15 then redis.call('HSET', record, unpack(ARGV, 15)) end
redis.call('EXPIRE', record, life('queued', ttl))
if ARGV[4] == '1' then place(record, id, '', 'queued', now, ttl) end
return {1}
