//! The app's doors in a case: charges enqueued over HTTP and through the
//! SQL function (new keys and replayed ones), cancels, refunds over HTTP or
//! the store's API, and the app's raw SQL reopening a settled attempt.

use cobro::domain::{Amount, ChargeRequest, IdempotencyKey};
use cobro::state::State;
use cobro::store::{Backend, CancelReason};
use serde_json::json;
use uuid::Uuid;

use super::super::steps::{Key, Part};
use super::{Answered, World, amount_of, db_message, label, order_id, payment_method, short};

impl World {
    fn key(&self, order: u8, key: Key) -> Uuid {
        let used = &self.keys[usize::from(order)];
        match key {
            Key::Replay(n) if !used.is_empty() => used[usize::from(n) % used.len()],
            Key::Replay(_) | Key::New => Uuid::new_v4(),
        }
    }

    fn remember(&mut self, order: u8, key: Uuid) {
        let used = &mut self.keys[usize::from(order)];
        if !used.contains(&key) {
            used.push(key);
        }
    }

    pub(super) async fn enqueue_http(&mut self, order: u8, key: Key) -> String {
        let key = self.key(order, key);
        let charge = json!({
            "order_id": order_id(order),
            "amount_minor": amount_of(order),
            "currency": "EUR",
            "payment_method": payment_method(order),
        });
        let Answered {
            status,
            body,
            replayed,
        } = self
            .post(
                "app",
                "/charges",
                Some(key.to_string()),
                &charge,
                &[201, 409, 422],
            )
            .await;
        if status != 201 {
            return format!("{status} {}", body["error"]);
        }
        self.remember(order, key);
        let id: Uuid = body["attempt_id"].as_str().unwrap().parse().unwrap();
        format!(
            "201 attempt {}{}",
            short(id),
            if replayed { " (replayed)" } else { "" }
        )
    }

    pub(super) async fn enqueue_sql(&mut self, order: u8, key: Key) -> String {
        let key = self.key(order, key);
        let (oid, pm) = (order_id(order), payment_method(order));
        let done: Result<(Uuid, bool), String> = match self.db.backend {
            Backend::Postgres => {
                let pool = self.db.store.pg_pool().unwrap();
                let mut tx = pool.begin().await.unwrap();
                let row: Result<(Uuid, bool), sqlx::Error> = sqlx::query_as(
                    "SELECT attempt_id, created FROM cobro.enqueue_charge($1, $2, $3, $4, $5)",
                )
                .bind(&oid)
                .bind(amount_of(order))
                .bind("EUR")
                .bind(key)
                .bind(&pm)
                .fetch_one(&mut *tx)
                .await;
                match row {
                    Ok(r) => {
                        tx.commit().await.unwrap();
                        Ok(r)
                    }
                    Err(e) => Err(format!("SQL error: {}", db_message(&e))),
                }
            }
            Backend::Sqlite => {
                let req = ChargeRequest::parse(
                    &oid,
                    amount_of(order),
                    "EUR",
                    Some(&key.to_string()),
                    Some(&pm),
                )
                .unwrap();
                let pool = self.db.store.sqlite_pool().unwrap();
                let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
                match cobro::store::enqueue_charge_sqlite(&mut tx, &req).await {
                    Ok(e) => {
                        tx.commit().await.unwrap();
                        Ok((e.attempt_id, e.created))
                    }
                    Err(e) => Err(format!("refused: {e}")),
                }
            }
        };
        match done {
            Ok((id, created)) => {
                self.remember(order, key);
                format!(
                    "attempt {}{}",
                    short(id),
                    if created { "" } else { " (existing)" }
                )
            }
            Err(refused) => refused,
        }
    }

    /// The app cancels the order with `reason` (`POST /orders/{id}/cancel`).
    pub(super) async fn cancel(&self, order: u8, reason: CancelReason) -> String {
        let path = format!("/orders/{}/cancel", order_id(order));
        let reason = json!({ "reason": reason.as_str() });
        let Answered { status, body, .. } = self
            .post("app", &path, None, &reason, &[200, 404, 409])
            .await;
        match status {
            200 => format!(
                "200 cancelled {} stopped {}",
                body["attempts_cancelled"], body["retries_stopped"]
            ),
            _ => format!("{status} {}", body["error"]),
        }
    }

    pub(super) async fn refund(&mut self, order: u8, part: Part, http: bool) -> String {
        // The approved charge (of this order, else of the next one that has
        // one); with none anywhere, the order's latest charge, to be refused.
        let mut approved = self
            .candidates(order, |a| !a.is_refund() && a.state == State::Aprobado)
            .await;
        let Some(charge) = approved.pop().or(self.charges(order).await.pop()) else {
            return "no charge".into();
        };
        let minor = match part {
            Part::Full => charge.amount_minor,
            Part::Half => (charge.amount_minor / 2).max(1),
            Part::Cent => 1,
        };
        let key = IdempotencyKey::generate();
        if !http {
            return match self
                .db
                .store
                .request_refund(charge.id, Amount::parse(minor).unwrap(), key, "app")
                .await
            {
                Ok(r) => format!(
                    "refund {} of {minor} of {} asked",
                    short(r.refund_id),
                    label(&charge)
                ),
                Err(e) => format!("refund of {}: refused: {e}", label(&charge)),
            };
        }
        let refund = json!({ "attempt_id": charge.id, "amount_minor": minor });
        let expected = [201, 404, 409, 422];
        let Answered {
            status,
            body: reply,
            ..
        } = self
            .post("app", "/refunds", Some(key.to_string()), &refund, &expected)
            .await;
        match status {
            201 => format!(
                "201 refund {} of {minor} of {}",
                reply["refund_id"]
                    .as_str()
                    .map_or("?".into(), |s| s[..8].to_owned()),
                label(&charge)
            ),
            _ => format!("refund of {}: {status} {}", label(&charge), reply["error"]),
        }
    }

    /// The app's raw SQL: a settled attempt back to `PENDIENTE`.
    pub(super) async fn raw_reopen(&mut self, order: u8, pick: u8) -> String {
        let settled = self.candidates(order, |a| a.state.is_terminal()).await;
        if settled.is_empty() {
            return "nothing settled".into();
        }
        let a = &settled[usize::from(pick) % settled.len()];
        let sql = self.db.sql(
            "UPDATE cobro.payment_attempts SET state = 'PENDIENTE', version = version + 1
              WHERE id = $1::uuid AND state IN ('APROBADO', 'RECHAZADO')",
            "UPDATE payment_attempts SET state = 'PENDIENTE', version = version + 1
              WHERE id = ?1 AND state IN ('APROBADO', 'RECHAZADO')",
        );
        match self.db.exec(sql, sql, &[&a.id.to_string()]).await {
            Ok(n) => format!("{} {} -> PENDIENTE: {n} row", label(a), a.state),
            Err(e) => format!("{} {}: SQL error: {}", label(a), a.state, db_message(&e)),
        }
    }
}
