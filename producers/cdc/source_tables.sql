-- The source database of the CDC streams (ARCHITECTURE §5): the tables the simulator changes and
-- whose committed state is the oracle for the silver mirrors (ARCHITECTURE §9).
--
-- STRICT so that a value of the wrong type is refused rather than stored as whatever SQLite's
-- type affinity makes of it: a change image must hold exactly what the row holds. Money and
-- instants are text on purpose: a decimal with two places and an ISO-8601 UTC instant with
-- milliseconds survive JSON, Debezium and DMS unchanged, where a float or a driver's datetime
-- would not; the checks pin them to one canonical spelling each.
-- Idempotent (if not exists): applied every time the database is opened.

create table if not exists customers (
    customer_id integer primary key,
    name text not null,
    email text not null,
    country text not null check (country in ('DE', 'US', 'FR', 'BR', 'JP', 'IN', 'GB', 'ES', 'IT', 'CA')),
    city text,
    tier text not null check (tier in ('bronze', 'silver', 'gold')),
    created_at text not null
        check (created_at glob '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    updated_at text not null
        check (updated_at glob '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z')
) strict;

create table if not exists accounts (
    account_id integer primary key,
    -- no foreign key: CDC delivers the tables independently, so an account may arrive
    -- before (or outlive) its customer in the lakehouse whatever the source enforces
    customer_id integer not null,
    account_type text not null check (account_type in ('checking', 'savings', 'credit')),
    -- the canonical two-place form: what Decimal.quantize(Decimal('0.01')) prints
    balance text not null check (printf('%.2f', balance) = balance),
    currency text not null check (currency in ('EUR', 'USD', 'GBP')),
    status text not null check (status in ('active', 'frozen', 'closed')),
    updated_at text not null
        check (updated_at glob '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z')
) strict;
