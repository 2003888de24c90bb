-- Work the database did for nothing on every write of the charge path
-- (issue 15, measured in BENCHMARKS.md):
--
-- 1. apalis-postgres 1.0's migrations leave two indexes that duplicate
--    others exactly: `unique_job_id` (the same column as `jobs_pkey`) and
--    `lidx` (the same column as `idx_apalis_jobs_lock_by`; its
--    "streamline indices" migration dropped the other old ones but not
--    this). Each wake-up is inserted, taken and acknowledged, three
--    non-HOT writes, so each duplicate cost three index insertions per
--    charge. The uniqueness of a job's id stays with `jobs_pkey`.
--    `apalis.workers` has two more (`wtidx` and `lsidx`, the same as
--    `idx_apalis_workers_worker_type` and `idx_apalis_workers_last_seen`),
--    paid on every heartbeat. Its third, `unique_worker_id` (the same as
--    `workers_pkey`), stays: apalis' foreign key from `jobs.lock_by` is
--    bound to it, and a heartbeat's write is not worth re-validating that
--    key over every job.
DROP INDEX IF EXISTS apalis.unique_job_id;
DROP INDEX IF EXISTS apalis.lidx;
DROP INDEX IF EXISTS apalis.wtidx;
DROP INDEX IF EXISTS apalis.lsidx;

-- 2. `BEFORE UPDATE OF gateway_ref` fires whenever the column is in the
--    statement's SET list, and the compare-and-set names it in every
--    write: the PL/pgSQL function ran on every state change. It now runs
--    only when its own condition holds, which is exactly when it refuses.
DROP TRIGGER payment_attempts_gateway_ref_set_once ON cobro.payment_attempts;
CREATE TRIGGER payment_attempts_gateway_ref_set_once
    BEFORE UPDATE OF gateway_ref ON cobro.payment_attempts
    FOR EACH ROW
    WHEN (OLD.gateway_ref IS NOT NULL AND NEW.gateway_ref IS DISTINCT FROM OLD.gateway_ref)
    EXECUTE FUNCTION cobro.gateway_ref_set_once();
