#ifndef SPOOL_CSQLITE_SHIM_H
#define SPOOL_CSQLITE_SHIM_H

#include <sqlite3.h>

/// SQLITE_TRANSIENT is a macro with a function-pointer cast that Swift cannot
/// import; these wrappers make SQLite copy the bytes before the call returns.
static inline int spool_bind_text(sqlite3_stmt *statement, int index, const char *text, int length) {
    return sqlite3_bind_text(statement, index, text, length, SQLITE_TRANSIENT);
}

static inline int spool_bind_blob(sqlite3_stmt *statement, int index, const void *bytes, int length) {
    return sqlite3_bind_blob(statement, index, bytes, length, SQLITE_TRANSIENT);
}

/// sqlite3_db_config is variadic, which Swift cannot call: a connection
/// that must leave a file as it found it does not checkpoint it on close.
static inline int spool_no_checkpoint_on_close(sqlite3 *db) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)0);
}

#endif
