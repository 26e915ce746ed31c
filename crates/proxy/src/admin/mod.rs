//! The admin console: a client that logs in to the virtual database `pgyard` (as an
//! `admin_users` user, or any user under trust) gets no server; its simple queries are admin
//! commands (`SHOW POOLS`, `SHOW CLIENTS`, `SHOW SERVERS`, `SHOW STATS`, `SHOW CONFIG`,
//! `RELOAD`, `PAUSE`, `RESUME`, …) answered with PgBouncer's column names. The client session
//! parses a command ([`parse`]) and, when it needs the proxy's state or an action, asks the
//! adapter with [`AdminRequest`]; the adapter's [`AdminReply`] (a [`Snapshot`] of plain data,
//! or the action's outcome) is rendered here ([`answer`]). See `docs/proxy.md`.

mod command;
mod render;
mod snapshot;

pub use command::{parse, Command, Show, DATABASE_REQUIRED};
pub use render::{answer, timestamp};
pub use snapshot::{
    Activity, ClientAddr, ClientRow, ClientState, ClientStats, ConfigRow, DatabaseRow, PoolRow,
    ServerRow, ServerState, Snapshot,
};

/// The database name that opens the admin console.
pub const ADMIN_DATABASE: &str = "pgyard";

/// PgBouncer's answer to a PAUSE while paused.
pub const ALREADY_PAUSED: &str = "already suspended/paused";

/// PgBouncer's answer to a RESUME while not paused.
pub const NOT_PAUSED: &str = "pooler is not paused/suspended";

/// PgBouncer's refusal of a user who may not use the admin console (FATAL 08P01).
pub const NOT_ALLOWED: &str = "not allowed";

/// The answer to a PAUSE still waiting for servers when a RESUME came.
pub const PAUSE_ENDED: &str = "PAUSE ended by RESUME before every server was released";

/// The answer to RELOAD when there is no configuration file to re-read.
pub const NO_FILE: &str =
    "RELOAD: nothing to re-read: pgyard proxy was started with flags, not --config FILE";

/// Longest admin message read (a command is a few words).
pub const ADMIN_MESSAGE_MAX: usize = 64 * 1024;

/// What an admin command needs from the adapter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminRequest {
    /// A [`Snapshot`] of the proxy now.
    Snapshot,
    /// Re-read the configuration file and apply it.
    Reload,
    /// Lend no more servers; reply once no server is lent.
    Pause,
    /// Lend servers again.
    Resume,
    /// Close the servers of a database (of every one: `None`) when they are next idle;
    /// an unknown database is refused with [`no_such_database`].
    Reconnect(Option<String>),
    /// Reply once no server of the database (of any: `None`) is waiting to be closed.
    WaitClose(Option<String>),
    /// Refuse new logins to the database.
    Disable(String),
    /// Admit new logins to the database again.
    Enable(String),
    /// Pause one database; reply once none of its servers is left.
    PauseDatabase(String),
    /// Resume a database paused by name; refused with [`not_paused`] otherwise.
    ResumeDatabase(String),
    /// Close the database's clients (FATAL [`KILLED`]) and servers now, and pause it.
    Kill(String),
    /// Stop the proxy at once. Never answered: the asking connection closes with the rest.
    Shutdown,
}

impl AdminRequest {
    /// The tag of the CommandComplete that answers the command asking it.
    pub fn tag(&self) -> &'static str {
        match self {
            AdminRequest::Snapshot => "SHOW",
            AdminRequest::Reload => "RELOAD",
            AdminRequest::Pause | AdminRequest::PauseDatabase(_) => "PAUSE",
            AdminRequest::Resume | AdminRequest::ResumeDatabase(_) => "RESUME",
            AdminRequest::Reconnect(_) => "RECONNECT",
            AdminRequest::WaitClose(_) => "WAIT_CLOSE",
            AdminRequest::Disable(_) => "DISABLE",
            AdminRequest::Enable(_) => "ENABLE",
            AdminRequest::Kill(_) => "KILL",
            AdminRequest::Shutdown => "SHUTDOWN",
        }
    }
}

/// PgBouncer's FATAL (08P01) to the clients of a database KILLed on the console.
pub const KILLED: &str = "database removed";

/// PgBouncer's answer to RESUME of a database that is not paused by name.
pub fn not_paused(name: &str) -> String {
    format!("database {name} is not paused")
}

/// PgBouncer's answer to a command naming a database it does not know (08P01).
pub fn no_such_database(name: &str) -> String {
    format!("no such database: {name}")
}

/// PgBouncer's FATAL (08P01) for a client logging in to a DISABLEd database.
pub fn database_disabled(name: &str) -> String {
    format!("database \"{name}\" is disabled")
}

/// The adapter's answer to an [`AdminRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminReply {
    /// The proxy's state.
    Snapshot(Box<Snapshot>),
    /// The action is done.
    Done,
    /// The action failed, with the error the admin client gets.
    Failed(AdminError),
}

impl AdminReply {
    /// Its kind, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            AdminReply::Snapshot(_) => "a snapshot",
            AdminReply::Done => "done",
            AdminReply::Failed(_) => "a failure",
        }
    }
}

/// An ERROR for the admin client (the session goes on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminError {
    /// The SQLSTATE.
    pub code: &'static str,
    /// The message.
    pub message: String,
}

impl AdminError {
    /// An error with `code`.
    pub fn new(code: &'static str, message: impl Into<String>) -> AdminError {
        AdminError {
            code,
            message: message.into(),
        }
    }

    /// PgBouncer's kind of admin error: SQLSTATE 08P01.
    pub fn pooler(message: impl Into<String>) -> AdminError {
        AdminError::new("08P01", message)
    }

    /// A failed RELOAD: SQLSTATE F0000 (config_file_error), as PgBouncer's.
    pub fn reload(message: impl Into<String>) -> AdminError {
        AdminError::new("F0000", message)
    }
}
