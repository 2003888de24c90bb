-- The scale scenario's tables: :n historical attempts, one order each, spread
-- over 180 days, straight into cobro.payment_attempts (psql variables n and
-- open). Settled mostly (about 88 % APROBADO, 12 % RECHAZADO, one in a
-- thousand of those with a business retry scheduled days ahead); :open of
-- them in doubt or in review (half DESCONOCIDO, their next check an hour
-- ahead, a tenth of them younger than an hour; half EN_REVISION, waiting for
-- finance). Each has its three transition-log rows (enqueued, claim,
-- outcome). apalis' jobs table holds what a worker's would: one pending
-- wake-up per attempt with a due time, and one day of finished wake-ups
-- (the product's default COBRO_JOB_RETENTION). Then VACUUM ANALYZE, as
-- autovacuum would have done to an old table. The attempts in flight come
-- from live.sql, just before the statements are measured.
--
-- Bulk load: the indexes, primary/unique keys and foreign keys of
-- payment_attempts and attempt_transitions (and the foreign keys pointing
-- at them) are dropped first and rebuilt after the insert from their own
-- definitions (pg_get_indexdef, pg_get_constraintdef), as the migrations
-- made them; the last step checks that every definition is back, unchanged.
-- The charge rule's trigger (charge_gate) is off for the load and on again
-- after (checked last too): it only refuses, and these rows are one per order
-- and valid by construction, but it takes a lock per order (a statement of
-- 1 M rows overflows PostgreSQL's lock table) and, with the indexes dropped,
-- reads the table once per row.

\set ON_ERROR_STOP 1
\if :{?timing}
\timing on
\endif
SET maintenance_work_mem = '1GB';

CREATE TEMP TABLE bulk_tables AS
SELECT unnest(ARRAY['cobro.payment_attempts'::regclass, 'cobro.attempt_transitions'::regclass]) AS rel;

-- What the migrations made: every index of those tables, and every primary,
-- unique or foreign key on them or pointing at them.
CREATE TEMP VIEW bulk_ddl AS
SELECT 3 AS restore_order, c.conrelid::regclass::text AS tbl, c.conname::text AS name,
       format('ALTER TABLE %s ADD CONSTRAINT %I %s', c.conrelid::regclass, c.conname,
              pg_get_constraintdef(c.oid)) AS ddl,
       format('ALTER TABLE %s DROP CONSTRAINT %I', c.conrelid::regclass, c.conname) AS drop_ddl
  FROM pg_constraint c
 WHERE c.contype = 'f'
   AND (c.conrelid IN (SELECT rel FROM bulk_tables) OR c.confrelid IN (SELECT rel FROM bulk_tables))
UNION ALL
SELECT 2, c.conrelid::regclass::text, c.conname::text,
       format('ALTER TABLE %s ADD CONSTRAINT %I %s', c.conrelid::regclass, c.conname,
              pg_get_constraintdef(c.oid)),
       format('ALTER TABLE %s DROP CONSTRAINT %I', c.conrelid::regclass, c.conname)
  FROM pg_constraint c
 WHERE c.contype IN ('p', 'u') AND c.conrelid IN (SELECT rel FROM bulk_tables)
UNION ALL
SELECT 1, i.indrelid::regclass::text, i.indexrelid::regclass::text,
       pg_get_indexdef(i.indexrelid),
       format('DROP INDEX %s', i.indexrelid::regclass)
  FROM pg_index i
 WHERE i.indrelid IN (SELECT rel FROM bulk_tables)
   AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.contype IN ('p', 'u', 'x'));

CREATE TEMP TABLE bulk_saved AS SELECT * FROM bulk_ddl;
-- Besides the keys: what every index of the two tables is (the keys' own
-- indexes included), to compare after the rebuild.
CREATE TEMP VIEW bulk_indexes AS
SELECT i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS def
  FROM pg_index i WHERE i.indrelid IN (SELECT rel FROM bulk_tables);
CREATE TEMP TABLE bulk_saved_indexes AS SELECT * FROM bulk_indexes;

SELECT drop_ddl FROM bulk_saved ORDER BY restore_order DESC, tbl, name \gexec
ALTER TABLE cobro.payment_attempts DISABLE TRIGGER charge_gate;

INSERT INTO cobro.payment_attempts
    (id, order_id, amount_minor, currency, payment_method, idempotency_key, state,
     gateway_charge_id, decline_code, check_count, send_count, next_action_at, version,
     created_at, updated_at)
SELECT gen_random_uuid(), 'hist-' || i, 100 + (i * 7919) % 50000, 'USD', 'pm_card_visa',
       gen_random_uuid(), s.state,
       CASE WHEN s.state = 'APROBADO' THEN 'ch_hist_' || i END,
       CASE WHEN s.state = 'RECHAZADO' THEN (ARRAY['card_declined', 'insufficient_funds', 'do_not_honor'])[1 + (i % 3)::int] END,
       CASE s.state WHEN 'EN_REVISION' THEN 5 WHEN 'DESCONOCIDO' THEN 1 + i % 4 ELSE 0 END,
       1,
       CASE WHEN s.state = 'DESCONOCIDO' THEN now() + interval '1 hour' + i * interval '1 ms'
            WHEN s.state = 'RECHAZADO' AND s.r < 1 THEN now() + (1 + i % 7) * interval '1 day' END,
       3, s.created_at, s.created_at + interval '2 s'
  FROM generate_series(1, :n::bigint) i,
       LATERAL (SELECT (i * 2654435761) % 1000 AS r) h,
       LATERAL (SELECT h.r,
                       CASE WHEN i <= :open / 2 THEN 'DESCONOCIDO'
                            WHEN i <= :open THEN 'EN_REVISION'
                            WHEN h.r < 120 THEN 'RECHAZADO'
                            ELSE 'APROBADO' END AS state,
                       CASE WHEN i <= :open / 2 AND i % 10 = 0
                                 THEN now() - (i % 3000) * interval '1 s'
                            WHEN i <= :open
                                 THEN now() - interval '2 hours' - (i * 7919) % (30 * 86400) * interval '1 s'
                            ELSE now() - (i * 7919) % (180 * 86400) * interval '1 s' END AS created_at) s;

-- The transition log: enqueued, claim, then the outcome.
INSERT INTO cobro.attempt_transitions (attempt_id, from_state, to_state, cause, actor, http_status, at)
SELECT a.id,
       (ARRAY[NULL, 'PENDIENTE', 'EN_PROCESO'])[k],
       (ARRAY['PENDIENTE', 'EN_PROCESO',
              CASE WHEN a.state = 'EN_REVISION' THEN 'DESCONOCIDO' ELSE a.state END])[k],
       (ARRAY['enqueued', 'claim',
              CASE a.state WHEN 'APROBADO' THEN 'gateway_approved' WHEN 'RECHAZADO' THEN 'gateway_declined'
                           ELSE 'gateway_timeout' END])[k],
       (ARRAY['app', 'worker:hist', 'worker:hist'])[k],
       CASE WHEN k = 3 AND a.state IN ('APROBADO', 'RECHAZADO') THEN 200 END,
       a.created_at + (k - 1) * interval '1 s'
  FROM cobro.payment_attempts a, generate_series(1, 3) k;

SELECT ddl FROM bulk_saved ORDER BY restore_order, tbl, name \gexec
ALTER TABLE cobro.payment_attempts ENABLE TRIGGER charge_gate;

-- Every index and key is back, defined as before.
DO $$
DECLARE
    v_missing text;
BEGIN
    SELECT string_agg(coalesce(s.name, b.name), ', ') INTO v_missing
      FROM bulk_saved_indexes s FULL JOIN bulk_indexes b ON b.name = s.name AND b.def = s.def
     WHERE s.name IS NULL OR b.name IS NULL;
    IF v_missing IS NOT NULL THEN
        RAISE EXCEPTION 'bulk load: index definitions differ after the rebuild: %', v_missing;
    END IF;
    SELECT string_agg(coalesce(s.name, b.name), ', ') INTO v_missing
      FROM bulk_saved s FULL JOIN bulk_ddl b ON b.tbl = s.tbl AND b.name = s.name AND b.ddl = s.ddl
     WHERE s.name IS NULL OR b.name IS NULL;
    IF v_missing IS NOT NULL THEN
        RAISE EXCEPTION 'bulk load: keys or indexes differ after the rebuild: %', v_missing;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = 'cobro.payment_attempts'::regclass
                      AND tgname = 'charge_gate' AND tgenabled = 'O') THEN
        RAISE EXCEPTION 'bulk load: the charge_gate trigger is not enabled again';
    END IF;
END;
$$;

-- apalis' jobs: what cobro.wake would have pushed and the worker left.
INSERT INTO apalis.workers (id, worker_type, storage_name, started_at)
VALUES ('cobro.charge-0', 'cobro.charge', 'PostgresStorage', now() - interval '1 day');
INSERT INTO apalis.jobs (id, job_type, job, status, attempts, max_attempts, run_at, lock_at, lock_by,
                         done_at, priority)
SELECT apalis.generate_ulid(), 'cobro.charge',
       convert_to(json_build_object('attempt_id', a.id)::text, 'UTF8'),
       CASE WHEN a.next_action_at IS NOT NULL THEN 'Pending' ELSE 'Done' END,
       CASE WHEN a.next_action_at IS NOT NULL THEN 0 ELSE 1 END,
       3,
       coalesce(a.next_action_at, a.created_at),
       CASE WHEN a.next_action_at IS NULL THEN a.created_at END,
       CASE WHEN a.next_action_at IS NULL THEN 'cobro.charge-0' END,
       CASE WHEN a.next_action_at IS NULL THEN a.created_at + interval '2 s' END,
       CASE WHEN a.state = 'DESCONOCIDO' THEN 1 ELSE 0 END
  FROM cobro.payment_attempts a
 WHERE a.next_action_at IS NOT NULL
    OR (a.state IN ('APROBADO', 'RECHAZADO') AND a.created_at > now() - interval '1 day');

VACUUM ANALYZE cobro.payment_attempts;
VACUUM ANALYZE cobro.attempt_transitions;
VACUUM ANALYZE apalis.jobs;
