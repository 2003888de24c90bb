-- The wake-ups still waiting in the queue, by the attempt they are for, so
-- that the sweeper can tell a lost wake-up from one that is only late behind
-- a backlog; see migrations/postgres/…_queued_wakeups.sql. The payload is
-- cobro's JSON stored as a BLOB; anything else yields NULL.
CREATE INDEX jobs_pending_wake_target ON Jobs (
    CASE WHEN json_valid(CAST(job AS TEXT))
         THEN json_extract(CAST(job AS TEXT), '$.attempt_id') END)
    WHERE status = 'Pending';
