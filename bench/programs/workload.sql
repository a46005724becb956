-- A fixed, deterministic SQL workload for bench/run.py (the "sqlite" real program), run as
--   sqlite3 :memory: < workload.sql
-- An in-memory database keeps the disk out of the measurement: every page lives in memory that
-- sqlite obtains from malloc, and sorting, grouping and string functions allocate heavily.
-- run.py checks that every allocator prints the same output. The row count is 100000 unless a
-- temporary table bench_rows says otherwise; run.py prepends one with the count for its mode.
PRAGMA cache_size = -65536;
CREATE TEMP TABLE IF NOT EXISTS bench_rows(value INTEGER);

CREATE TABLE cfg(rows INTEGER);
INSERT INTO cfg VALUES (coalesce((SELECT value FROM temp.bench_rows), 100000));

CREATE TABLE item(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, qty INTEGER, price REAL);
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < (SELECT rows FROM cfg))
INSERT INTO item
SELECT x, (x * 7919) % 997, printf('item-%08d-%08x', x, (x * 2654435761) % 4294967296),
       (x * 31) % 100, ((x * 17) % 10000) / 100.0
FROM n;

CREATE TABLE orders(id INTEGER PRIMARY KEY, item INTEGER, customer TEXT, amount INTEGER);
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < (SELECT rows FROM cfg))
INSERT INTO orders
SELECT x, 1 + (x * 104729) % (SELECT rows FROM cfg), 'cust-' || ((x * 13) % 5000), 1 + x % 9
FROM n;

CREATE INDEX item_grp ON item(grp, price);
CREATE INDEX orders_item ON orders(item);
CREATE INDEX orders_customer ON orders(customer);

SELECT 'groups', count(*), sum(c), round(sum(s), 2) FROM
  (SELECT grp, count(*) AS c, sum(price * qty) AS s FROM item GROUP BY grp);

SELECT 'top', customer, total FROM
  (SELECT customer, sum(o.amount * i.price) AS total FROM orders o JOIN item i ON i.id = o.item
   GROUP BY customer ORDER BY total DESC, customer LIMIT 5);

SELECT 'concat', length(group_concat(name, ',')), count(DISTINCT substr(name, 15, 3)) FROM item;

SELECT 'sorted', count(*), min(name), max(name) FROM (SELECT name FROM item ORDER BY name DESC);

UPDATE item SET name = name || '-' || upper(substr(name, 6, 4)), qty = qty + 1 WHERE grp % 3 = 0;
DELETE FROM orders WHERE amount = 5;
DELETE FROM item WHERE id % 7 = 0;

SELECT 'after', count(*), sum(qty), sum(length(name)) FROM item;
SELECT 'orders', count(*), sum(amount) FROM orders;

SELECT 'window', sum(r) FROM
  (SELECT rank() OVER (PARTITION BY grp ORDER BY price DESC, id) AS r FROM item);
