-- Every commit that appends events announces each execution's new head on channel
-- `cr_events` (`execution_id:head`), so a replica that does not own the execution tails
-- its stream without polling. NOTIFY is delivered only after the commit: a listener never
-- hears of a row it cannot read yet (persist before expose). One notification per
-- statement and execution, not per row; the trigger adds no statement to a call.
CREATE FUNCTION cr_announce_event_heads() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('cr_events', execution_id || ':' || MAX(sequence))
    FROM appended
    GROUP BY execution_id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER events_announce_heads
    AFTER INSERT ON events
    REFERENCING NEW TABLE AS appended
    FOR EACH STATEMENT
    EXECUTE FUNCTION cr_announce_event_heads();
