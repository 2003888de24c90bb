-- The scale scenario's attempts in flight, inserted just before the
-- statements are measured (after history.sql): 100 PENDIENTE just enqueued
-- (their wake-ups due now) and 100 EN_PROCESO under a 30 s lease (their
-- wake-ups running), with their transition-log rows. None is due for the
-- sweeper yet (30 s grace, the lease's 30 s): the sweep's usual case.

\set ON_ERROR_STOP 1

INSERT INTO cobro.payment_attempts
    (id, order_id, amount_minor, currency, idempotency_key, state, next_action_at,
     lease_owner, lease_expires_at, send_count, version)
SELECT gen_random_uuid(), 'live-' || i, 1999, 'USD', gen_random_uuid(),
       CASE WHEN i <= 100 THEN 'PENDIENTE' ELSE 'EN_PROCESO' END,
       CASE WHEN i <= 100 THEN now() ELSE now() + interval '30 s' END,
       CASE WHEN i > 100 THEN 'bench-worker' END,
       CASE WHEN i > 100 THEN now() + interval '30 s' END,
       CASE WHEN i > 100 THEN 1 ELSE 0 END,
       CASE WHEN i > 100 THEN 1 ELSE 0 END
  FROM generate_series(1, 200) i;

INSERT INTO cobro.attempt_transitions (attempt_id, from_state, to_state, cause, actor)
SELECT a.id, (ARRAY[NULL, 'PENDIENTE'])[k], (ARRAY['PENDIENTE', 'EN_PROCESO'])[k],
       (ARRAY['enqueued', 'claim'])[k], (ARRAY['app', 'bench-worker'])[k]
  FROM cobro.payment_attempts a,
       generate_series(1, CASE WHEN a.state = 'PENDIENTE' THEN 1 ELSE 2 END) k
 WHERE a.order_id LIKE 'live-%';

INSERT INTO apalis.jobs (id, job_type, job, status, attempts, max_attempts, run_at, lock_at, lock_by, priority)
SELECT apalis.generate_ulid(), 'cobro.charge',
       convert_to(json_build_object('attempt_id', a.id)::text, 'UTF8'),
       CASE WHEN a.state = 'PENDIENTE' THEN 'Pending' ELSE 'Running' END,
       CASE WHEN a.state = 'PENDIENTE' THEN 0 ELSE 1 END,
       3, a.created_at,
       CASE WHEN a.state = 'EN_PROCESO' THEN a.created_at END,
       CASE WHEN a.state = 'EN_PROCESO' THEN 'cobro.charge-0' END,
       0
  FROM cobro.payment_attempts a
 WHERE a.order_id LIKE 'live-%';
