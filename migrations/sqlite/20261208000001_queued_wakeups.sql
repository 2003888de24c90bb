-- The wake-ups still waiting in the queue, by the attempt they are for, so
-- that the sweeper can tell a lost wake-up from one that is only late behind
-- a backlog; see migrations/postgres/…_queued_wakeups.sql. The payload is
-- cobro's JSON stored as a BLOB; anything else yields NULL.
--
-- Tried once before (never released) and taken out: with apalis-sqlite
-- fetching, a worker could sit for minutes with due wake-ups queued, and
-- the sweeper's re-wake had been what woke it. Wake-ups are now fetched by
-- cobro's own backend (src/wakeq), whose poll timer does not depend on
-- anything being inserted.
CREATE INDEX jobs_pending_wake_target ON Jobs (
    CASE WHEN json_valid(CAST(job AS TEXT))
         THEN json_extract(CAST(job AS TEXT), '$.attempt_id') END)
    WHERE status = 'Pending';
