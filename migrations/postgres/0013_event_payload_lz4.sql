-- Event payloads over about 2 KiB (coalesced text deltas run to 8 KiB) are compressed as
-- they are stored. PostgreSQL's default method, pglz, took about 57 µs per 8 KiB delta on
-- this project's 2-core machine, a third of the database's CPU while an agent floods text;
-- lz4 takes about 5 µs and compresses agent text as well. Rows already stored keep pglz
-- (both read back alike). A server built without lz4 keeps pglz. SQLite does not compress,
-- so its tree has no counterpart.
DO $$
BEGIN
    ALTER TABLE events ALTER COLUMN payload SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'lz4 is not built in: event payloads stay compressed with pglz';
END
$$;
