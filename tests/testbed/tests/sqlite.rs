//! A real storage engine on the power-loss filesystem: SQLite (bundled) through rusqlite.

use std::path::Path;

use keel_testbed::durable_fs::DurableFs;
use rusqlite::Connection;

fn open(path: &Path, journal_mode: &str, synchronous: &str) -> Connection {
    let conn = Connection::open(path).unwrap();
    let mode: String =
        conn.query_row(&format!("PRAGMA journal_mode={journal_mode}"), [], |r| r.get(0)).unwrap();
    assert_eq!(mode.to_lowercase(), journal_mode.to_lowercase());
    conn.execute_batch(&format!("PRAGMA synchronous={synchronous}")).unwrap();
    conn
}

fn rows(conn: &Connection) -> i64 {
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
    conn.query_row("SELECT count(*) FROM kv", [], |r| r.get(0)).unwrap()
}

/// Commits `batches` transactions of 100 rows, then leaves one transaction open (uncommitted),
/// cuts the power with the connection still open, and counts the rows after reopening.
fn committed_rows_after_power_loss(journal_mode: &str, synchronous: &str, batches: i64) -> i64 {
    let dir = tempfile::tempdir().unwrap();
    let mut fs = DurableFs::mount(dir.path()).unwrap();
    let db = fs.mountpoint().join("test.db");
    let mut conn = open(&db, journal_mode, synchronous);
    conn.execute_batch("CREATE TABLE kv (k INTEGER PRIMARY KEY, v BLOB NOT NULL)").unwrap();
    for batch in 0..batches {
        let tx = conn.transaction().unwrap();
        for i in 0..100 {
            tx.execute("INSERT INTO kv VALUES (?1, ?2)", (batch * 100 + i, vec![7u8; 3000])).unwrap();
        }
        tx.commit().unwrap();
    }
    conn.execute_batch("BEGIN; INSERT INTO kv VALUES (-1, x'00'); DELETE FROM kv WHERE k BETWEEN 0 AND 49;")
        .unwrap();
    assert_eq!(rows(&conn), batches * 100 - 50 + 1);

    fs.power_loss().unwrap();
    drop(conn); // its files belong to the dead mount: closing must not hang
    let conn = open(&db, journal_mode, synchronous);
    let n = rows(&conn);
    drop(conn);
    drop(fs);
    n
}

#[test]
fn sqlite_wal_full_keeps_every_committed_transaction() {
    assert_eq!(committed_rows_after_power_loss("WAL", "FULL", 5), 500);
}

#[test]
fn sqlite_rollback_journal_extra_keeps_every_committed_transaction() {
    assert_eq!(committed_rows_after_power_loss("DELETE", "EXTRA", 5), 500);
}

/// With `synchronous=FULL` in rollback-journal mode, SQLite does not fsync the directory after
/// deleting the journal (its commit point): the last transaction is rolled back after power
/// loss, as SQLite documents for filesystems that do not persist an unlink right away.
#[test]
fn sqlite_rollback_journal_full_may_lose_the_last_transaction() {
    assert_eq!(committed_rows_after_power_loss("DELETE", "FULL", 5), 400);
}
