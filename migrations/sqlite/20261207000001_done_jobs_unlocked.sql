-- A finished wake-up lets go of its worker's name (SQLite only).
--
-- apalis-sqlite 1.0 acknowledges a job with
--   UPDATE Jobs SET status = …, done_at = … FROM json_each(?1) j
--    WHERE Jobs.id = j.task_id AND Jobs.lock_by = ?2
-- (queries/task/ack.sql). Without statistics SQLite searches it through
-- apalis' index on lock_by (LIdx), that is through every job this worker
-- process ever took, the finished ones included: 12 ms an acknowledgement
-- once a worker had taken 17,000 jobs, growing with every job, and each one
-- under the file's single write lock. One worker's throughput fell from
-- about 270 to 80 charges/s over a 20,000-charge run (BENCHMARKS.md,
-- "SQLite"). Finished jobs are kept for COBRO_JOB_RETENTION (a day), so a
-- long-running worker would only get slower.
--
-- No query reads lock_by of a job that is Done (the fetch, the lock, the
-- retries, the kill and the orphan recovery all look at jobs still in
-- flight), so clearing it when a job becomes Done keeps LIdx down to the
-- jobs in flight and the acknowledgement's search short whatever the
-- planner knows. Failed and Killed jobs keep theirs, as apalis left them.
CREATE TRIGGER jobs_done_unlocked
AFTER UPDATE OF status ON Jobs
WHEN NEW.status = 'Done' AND NEW.lock_by IS NOT NULL
BEGIN
    UPDATE Jobs SET lock_by = NULL WHERE rowid = NEW.rowid;
END;

UPDATE Jobs SET lock_by = NULL WHERE status = 'Done' AND lock_by IS NOT NULL;
