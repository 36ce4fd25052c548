//! The PostgreSQL and SQLite migration trees are written twice (one dialect line apart);
//! this reads both databases' catalogs after migrating and fails when they diverge.

use std::collections::BTreeSet;

use cursor_runner_store::SqlStore;
use sqlx::Connection;

use crate::backends::Scratch;

/// A column as both catalogs can say it: table, name, type (lower case), NOT NULL.
type Column = (String, String, String, bool);
/// An index (key and unique constraints included, names aside): table, columns in
/// order, unique.
type Index = (String, Vec<String>, bool);

const PG_COLUMNS: &str = "SELECT table_name::text, column_name::text, lower(data_type::text), is_nullable = 'NO' \
     FROM information_schema.columns WHERE table_schema = 'public' AND table_name <> '_sqlx_migrations'";
/// A PRIMARY KEY column other than an INTEGER one is nullable in SQLite unless declared
/// NOT NULL (a legacy quirk); what the schema means is NOT NULL, as in PostgreSQL. Bytes
/// are the one type the dialects spell apart: `BLOB` here is PostgreSQL's `BYTEA`.
const SQLITE_COLUMNS: &str = "SELECT m.name, c.name, replace(lower(c.type), 'blob', 'bytea'), c.\"notnull\" OR c.pk > 0 \
     FROM sqlite_master m JOIN pragma_table_info(m.name) c \
     WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name <> '_sqlx_migrations'";
const PG_INDEX_COLUMNS: &str = "SELECT t.relname::text, i.relname::text, a.attname::text, k.n, ix.indisunique \
     FROM pg_index ix JOIN pg_class i ON i.oid = ix.indexrelid JOIN pg_class t ON t.oid = ix.indrelid \
     JOIN pg_namespace ns ON ns.oid = t.relnamespace \
     CROSS JOIN LATERAL unnest(ix.indkey::int2[]) WITH ORDINALITY AS k(attnum, n) \
     JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum \
     WHERE ns.nspname = 'public' AND t.relname <> '_sqlx_migrations'";
const SQLITE_INDEX_COLUMNS: &str = "SELECT m.tbl_name, m.name, c.name, c.seqno, l.\"unique\" = 1 \
     FROM sqlite_master m JOIN pragma_index_list(m.tbl_name) l ON l.name = m.name \
     JOIN pragma_index_info(m.name) c \
     WHERE m.type = 'index' AND m.tbl_name <> '_sqlx_migrations'";

/// Indexes from rows of (table, index, column, position, unique).
fn indexes(rows: Vec<(String, String, String, i64, bool)>) -> BTreeSet<Index> {
    let mut rows = rows;
    rows.sort_by(|a, b| (&a.0, &a.1, a.3).cmp(&(&b.0, &b.1, b.3)));
    let mut grouped: Vec<((String, String), Vec<String>, bool)> = Vec::new();
    for (table, index, column, _, unique) in rows {
        match grouped.last_mut() {
            Some((key, columns, _)) if *key == (table.clone(), index.clone()) => columns.push(column),
            _ => grouped.push(((table, index), vec![column], unique)),
        }
    }
    grouped
        .into_iter()
        .map(|((table, _), columns, unique)| (table, columns, unique))
        .collect()
}

async fn postgres_schema() -> (BTreeSet<Column>, BTreeSet<Index>) {
    let (scratch, url) = Scratch::postgres().await;
    drop(SqlStore::connect(&url).await.expect("migrating PostgreSQL"));
    let mut db = sqlx::PgConnection::connect(&url).await.unwrap();
    let columns: Vec<Column> = sqlx::query_as(PG_COLUMNS).fetch_all(&mut db).await.unwrap();
    let index_rows = sqlx::query_as(PG_INDEX_COLUMNS).fetch_all(&mut db).await.unwrap();
    db.close().await.unwrap();
    scratch.remove().await;
    (columns.into_iter().collect(), indexes(index_rows))
}

async fn sqlite_schema() -> (BTreeSet<Column>, BTreeSet<Index>) {
    let (_scratch, url) = Scratch::sqlite();
    drop(SqlStore::connect(&url).await.expect("migrating SQLite"));
    let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let columns: Vec<Column> = sqlx::query_as(SQLITE_COLUMNS).fetch_all(&mut db).await.unwrap();
    let index_rows = sqlx::query_as(SQLITE_INDEX_COLUMNS).fetch_all(&mut db).await.unwrap();
    (columns.into_iter().collect(), indexes(index_rows))
}

/// What one set has that the other lacks, for the failure message.
fn difference<T: Ord + std::fmt::Debug>(postgres: &BTreeSet<T>, sqlite: &BTreeSet<T>) -> String {
    format!(
        "only in PostgreSQL: {:#?}\nonly in SQLite: {:#?}",
        postgres.difference(sqlite).collect::<Vec<_>>(),
        sqlite.difference(postgres).collect::<Vec<_>>()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_migration_trees_make_the_same_tables_columns_and_indexes() {
    let ((pg_columns, pg_indexes), (sqlite_columns, sqlite_indexes)) = (postgres_schema().await, sqlite_schema().await);
    assert!(pg_columns.len() > 50, "the catalogs were read: {pg_columns:?}");
    assert_eq!(
        pg_columns,
        sqlite_columns,
        "{}",
        difference(&pg_columns, &sqlite_columns)
    );
    assert!(!pg_indexes.is_empty());
    assert_eq!(
        pg_indexes,
        sqlite_indexes,
        "{}",
        difference(&pg_indexes, &sqlite_indexes)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_compresses_event_payloads_with_lz4() {
    let (scratch, url) = Scratch::postgres().await;
    drop(SqlStore::connect(&url).await.expect("migrating PostgreSQL"));
    let mut db = sqlx::PgConnection::connect(&url).await.unwrap();
    let method: String = sqlx::query_scalar(
        "SELECT attcompression::text FROM pg_attribute
         WHERE attrelid = 'events'::regclass AND attname = 'payload'",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    db.close().await.unwrap();
    scratch.remove().await;
    assert_eq!(
        method, "l",
        "pglz cost a third of the database's CPU in a flood of text"
    );
}
