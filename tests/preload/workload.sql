-- A deterministic SQLite workload for the LD_PRELOAD comparison (tests/preload/preload.sh):
-- tables filled by recursive CTEs, indexes, joins, aggregates, window functions, a large sort,
-- updates and deletes, and an integrity check. Every query has a total ORDER BY, so output under
-- glibc and under magpie must match byte for byte.
PRAGMA cache_size = -16000;
PRAGMA journal_mode = DELETE;

CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL,
                        joined INTEGER NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer INTEGER NOT NULL REFERENCES customers(id),
                     amount INTEGER NOT NULL, item TEXT NOT NULL, note TEXT);

BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
INSERT INTO customers
SELECT i,
       'customer-' || i || '-' || substr('abcdefghijklmnopqrstuvwxyz', 1 + i % 26, 1 + i % 9),
       'city' || (i * 7919 % 97),
       1600000000 + (i * 104729 % 31536000)
FROM n;

WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50000)
INSERT INTO orders
SELECT i,
       1 + (i * 2654435761 % 4294967296) % 5000,
       (i * 40503 % 100000) + 1,
       'item-' || (i * 31 % 1733),
       CASE WHEN i % 5 = 0 THEN printf('%.*c', i % 300, 'n') ELSE NULL END
FROM n;
COMMIT;

CREATE INDEX orders_customer ON orders(customer);
CREATE INDEX orders_item_amount ON orders(item, amount);
CREATE INDEX customers_city ON customers(city);

SELECT 'counts', (SELECT count(*) FROM customers), (SELECT count(*) FROM orders),
       (SELECT sum(amount) FROM orders), (SELECT sum(length(note)) FROM orders);

-- Join and aggregate: best cities.
SELECT c.city, count(*) AS orders, sum(o.amount) AS total, max(o.amount), min(o.amount)
FROM orders o JOIN customers c ON c.id = o.customer
GROUP BY c.city ORDER BY total DESC, c.city LIMIT 10;

-- Per-customer totals with a window function: rank within city.
SELECT city, name, total, rnk FROM (
  SELECT c.city, c.name, sum(o.amount) AS total,
         rank() OVER (PARTITION BY c.city ORDER BY sum(o.amount) DESC, c.id) AS rnk
  FROM customers c JOIN orders o ON o.customer = c.id
  GROUP BY c.id)
WHERE rnk <= 2 ORDER BY city, rnk LIMIT 30;

-- Items bought by many distinct customers.
SELECT item, count(DISTINCT customer) AS buyers, avg(amount)
FROM orders GROUP BY item HAVING buyers >= 28 ORDER BY buyers DESC, item LIMIT 15;

-- A large sort without an index, and string work over every row.
SELECT group_concat(id, ',') FROM (
  SELECT id FROM orders ORDER BY (amount * 7 + id) % 1009, note, id LIMIT 40);
SELECT count(*), sum(length(upper(item || coalesce(note, '')))),
       sum(instr(item, '17')), count(DISTINCT substr(item, 6, 2))
FROM orders;

-- Self-join through the customer index.
SELECT count(*) FROM orders a JOIN orders b ON a.customer = b.customer AND a.id < b.id
WHERE a.amount > 99000;

-- Updates, deletes, and a temporary table.
UPDATE orders SET amount = amount / 2, note = coalesce(note, '') || '-halved'
WHERE customer % 10 = 3;
DELETE FROM orders WHERE amount < 500;
CREATE TEMP TABLE city_totals AS
  SELECT c.city, sum(o.amount) AS total FROM orders o JOIN customers c ON c.id = o.customer
  GROUP BY c.city;
SELECT count(*), sum(total), max(total) FROM city_totals;
SELECT 'after', count(*), sum(amount), sum(length(note)) FROM orders;

-- JSON functions build and parse text.
SELECT json_group_array(json_object('id', id, 'amount', amount)) FROM (
  SELECT id, amount FROM orders WHERE customer = 42 ORDER BY id);

VACUUM;
PRAGMA integrity_check;
