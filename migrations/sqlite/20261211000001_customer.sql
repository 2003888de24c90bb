-- Customers, on SQLite: the column of migrations/postgres/…_customer.sql
-- (read it for why), under the payment method's rule (1-255 characters of
-- A-Z a-z 0-9 _ - . : with fewer than 12 digits: never card data). The
-- rule is a CHECK here, as the payment method's is; enqueue and business
-- retries run from Rust (src/store/lite/), which parse the customer with
-- src/domain's Customer::parse first and carry it to a retry.

ALTER TABLE payment_attempts ADD COLUMN customer TEXT
    CONSTRAINT payment_attempts_customer_token
    CHECK (length(customer) BETWEEN 1 AND 255
           AND customer NOT GLOB '*[^A-Za-z0-9_.:-]*'
           AND length(customer) - length(replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(customer, '0', ''), '1', ''), '2', ''), '3', ''), '4', ''), '5', ''), '6', ''), '7', ''), '8', ''), '9', '')) < 12);
