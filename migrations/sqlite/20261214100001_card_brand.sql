-- Each card network's retry caps apply to its own cards: the rule
-- (src/store/lite/caps.rs) looks up the card's brand in the transition
-- log's evidence among the attempts charged to its payment method, by
-- this index. No new column.
CREATE INDEX payment_attempts_method ON payment_attempts (payment_method)
    WHERE payment_method IS NOT NULL;
