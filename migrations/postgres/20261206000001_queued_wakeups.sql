-- Which attempt a wake-up job is for, and an index of the wake-ups still
-- waiting in the queue, so that the sweeper can tell a lost wake-up from one
-- that is only late behind a backlog.
--
-- The sweeper re-wakes an attempt whose due time is `grace` past. Behind a
-- backlog longer than the grace, that used to add a second (and third) job
-- for attempts whose own job was still queued: measured 2.6-3.2 wake-ups
-- per charge behind a 5,000-charge backlog (BENCHMARKS.md, issue 15). A job
-- that is still 'Pending' and due will run; re-waking it only adds work.
--
-- The payload is cobro's own JSON ({"attempt_id": "<uuid>"}, see
-- cobro.wake); anything else yields NULL and is never matched.
CREATE FUNCTION cobro.wake_target(p_job bytea) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT substring(encode(p_job, 'escape')
                     FROM '"attempt_id"\s*:\s*"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"')::uuid
$$;

CREATE INDEX jobs_pending_wake_target ON apalis.jobs (cobro.wake_target(job))
    WHERE status = 'Pending';
