-- A batch committed as one statement (an interaction's transition, a call's key, their
-- events: `store::sql::one_statement`) writes through data-modifying CTEs, which all run;
-- when one of them changed no row the whole statement must land nothing. This function is
-- called then: it aborts the statement, and with it its implicit transaction, naming the
-- write that changed nothing (0-based, in the batch's order) in the error's detail.
CREATE OR REPLACE FUNCTION cr_refuse_batch(write_index integer) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'CRB01',
        MESSAGE = 'a batch write changed no row',
        DETAIL = write_index::text;
END
$$;
