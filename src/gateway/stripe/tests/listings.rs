//! The Stripe adapter's listings: they send the `created` window and walk
//! every page; a failed page, or a page holding an id that cannot be
//! stored, fails the whole listing.

use super::*;

#[tokio::test]
async fn listings_send_the_window_and_walk_every_page() {
    let p1 = json!({"object": "list", "has_more": true, "data": [
        intent("pi_b", "succeeded", "k2"), intent("pi_a", "requires_payment_method", "k1")]});
    let mut declined = intent("pi_c", "requires_payment_method", "k3");
    declined["last_payment_error"] =
        json!({"code": "card_declined", "decline_code": "insufficient_funds"});
    let p2 = json!({"object": "list", "has_more": false, "data": [declined, intent("pi_d", "canceled", "k4")]});
    let f = Fake::start(vec![(200, p1, None), (200, p2, None)]).await;
    let from = chrono::DateTime::from_timestamp(1_764_547_000, 0).unwrap();
    let to = chrono::DateTime::from_timestamp(1_764_548_000, 0).unwrap();
    let records = f.gw.list(Listed::Charges, from, to).await.unwrap();
    let ids: Vec<(&str, &str)> = records
        .iter()
        .map(|r| (r.id.as_str(), r.status.as_str()))
        .collect();
    assert_eq!(
        ids,
        [("pi_b", "approved"), ("pi_c", "declined")],
        "unconfirmed and canceled executed nothing"
    );
    assert_eq!(records[0].currency, "EUR");
    let seen = f.seen();
    assert!(
        seen[0].uri.contains("created%5Bgte%5D=1764547000"),
        "{}",
        seen[0].uri
    );
    assert!(
        seen[0].uri.contains("created%5Blt%5D=1764548001"),
        "{}",
        seen[0].uri
    );
    assert!(
        seen[1].uri.contains("starting_after=pi_a"),
        "{}",
        seen[1].uri
    );
    // A failed page fails the whole listing.
    let f = Fake::start(vec![
        (
            200,
            json!({"has_more": true, "data": [intent("pi_x", "succeeded", "k")]}),
            None,
        ),
        (500, json!({}), None),
    ])
    .await;
    assert!(f.gw.list(Listed::Charges, from, to).await.is_err());
}

#[tokio::test]
async fn a_listing_with_an_id_that_cannot_be_stored_fails_whole() {
    let page = json!({"object": "list", "has_more": false, "data": [
        intent("pi_1", "succeeded", "k1"),
        intent("pi_\0_2", "succeeded", "k2"),
    ]});
    let f = Fake::start(vec![(200, page, None)]).await;
    let from = chrono::DateTime::from_timestamp(1_764_547_000, 0).unwrap();
    let to = chrono::DateTime::from_timestamp(1_764_548_000, 0).unwrap();
    let got = f.gw.list(Listed::Charges, from, to).await;
    assert!(
        matches!(&got, Err(ListError::BadPage { detail, .. })
            if detail.contains("holds the control character U+0000") && !detail.contains('\0')),
        "{got:?}"
    );
}
