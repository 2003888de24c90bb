//! cobro: a durable job-queue worker that charges payments so that a retry
//! never charges twice.
//!
//! The `payment_attempts` table is the truth and a queued job is only a
//! wake-up. Every attempt carries an idempotency key generated with the
//! payment intent; a worker sends it, treats a timeout as `DESCONOCIDO`
//! (never as a decline), looks the charge up by key before re-sending with
//! the same key, and hands finance what it cannot settle (`EN_REVISION`).
//! A refund is an attempt too (kind `refund`, its own key and queue), moved
//! by the same machine; the database keeps refunds within the capture.
//!
//! # Layout
//! In floors, each importing only those below it (docs/architecture.md;
//! `tests/layers.rs` holds the code to it).
//! - [`domain`]: parsed boundary values (amount, currency, order id, key, token; a stranger's text made fit to store), and the values several layers share (a wake-up's payload, a decline's category, reconciliation's window, finding and case kind).
//! - [`state`]: the state machine, one pure function over (state, event).
//! - [`backoff`]: the jittered 2-4-8-16-32 s check schedule.
//! - [`policy`]: pure decisions (what to do with an attempt, what a lookup means).
//! - [`retry`]: business retries: which declines are retried, when, how many times.
//! - [`gateway`]: the gateway trait and its HTTP adapter; every failure classified.
//! - [`store`]: all SQL: enqueue, refunds, compare-and-set writes, sweeper, history.
//! - [`engine`]: the wake-up handler (load → decide → act → record).
//! - [`janitor`]: when and where an attempt in review is looked up again (pure).
//! - [`recon`]: daily reconciliation with the gateway's listing; cases for finance.
//! - [`runtime`]: the worker process (apalis wiring, sweeper, shutdown).
//! - [`wakeq`]: the wake-up queue backend on both databases (fetch, lock, load and acknowledge in one transaction).
//! - [`metrics`]: Prometheus `/metrics`: process counters and database gauges.
//! - [`notify`]: customer notices delivered to the app's URL, signed (Standard Webhooks), retried for days.
//! - [`retention`]: the periodic purge of old webhook records (never the money trail).
//! - [`webhook`]: webhook signatures (Standard Webhooks, Stripe) and the event format.
//! - [`http`]: what every listener stands on: the hardened server loop, API keys and scopes.
//! - [`web`]: the web process: webhooks, HTTP enqueue and refunds, finance, metrics, health.
//! - [`sim`]: the gateway simulator, a real HTTP server for tests, demo and benchmarks.
//! - [`demo`]: `cobro demo`, the seed's fleet experiment in three worlds.
//! - [`finance`]: the escalation queue, resolutions, the daily summary, CSV.
//! - [`operator`]: the operator view: every attempt, searched and paginated in SQL.
//! - [`chaos`]: `cobro chaos`, the soak with real processes, kills and PostgreSQL restarts.

pub mod backoff;
pub mod breaker;
pub mod chaos;
pub mod demo;
pub mod domain;
pub mod engine;
pub mod finance;
pub mod gateway;
pub mod http;
pub mod janitor;
pub mod metrics;
pub mod notify;
pub mod operator;
pub mod pause;
pub mod policy;
pub mod recon;
pub mod retention;
pub mod retry;
pub mod runtime;
pub mod sim;
pub mod state;
pub mod store;
pub mod wakeq;
pub mod web;
pub mod webhook;
