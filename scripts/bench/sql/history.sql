-- The scale scenario's table: :n historical attempts, one order each, spread
-- over 180 days, straight into cobro.payment_attempts (psql variables n and
-- open). Settled mostly (about 88 % APROBADO, 12 % RECHAZADO, a few of
-- those with a business retry scheduled days ahead); :open of them in doubt
-- or in review (half DESCONOCIDO, their next check an hour ahead, a tenth of
-- them younger than an hour; half EN_REVISION, waiting for finance); plus
-- 200 in flight now (100 PENDIENTE just enqueued, 100 EN_PROCESO under a
-- lease). Then VACUUM ANALYZE, as autovacuum would have done to an old table.

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

VACUUM ANALYZE cobro.payment_attempts;
