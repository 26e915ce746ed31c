//! A stand-in backend on loopback for the adapter's unit tests: it logs anyone in (trust),
//! answers the replay-position queries as a server that is, or was, a standby, and holds
//! every CancelRequest until told.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::BytesMut;
use pgyard_types::Lsn;
use pgyard_wire::backend::{
    encode_command_complete, encode_data_row, encode_ready_for_query, encode_row_description,
    Authentication, BackendKeyData, FieldDescription, ParameterStatus, TransactionStatus,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// PostgreSQL's CancelRequest code.
const CANCEL_REQUEST: u32 = 80_877_102;

/// A backend that logs every client in as a primary and keeps each CancelRequest's
/// connection open until [`Backend::answer_cancels`].
pub(super) struct Backend {
    /// The port it listens on, on 127.0.0.1.
    pub(super) port: u16,
    /// CancelRequests received.
    pub(super) cancels: Arc<AtomicUsize>,
    answer: Arc<Notify>,
}

/// What the stand-in server is.
#[derive(Clone, Copy, Debug)]
pub(super) struct Role {
    /// In recovery (a standby) or not.
    pub(super) in_recovery: bool,
    /// What `pg_last_wal_replay_lsn()` answers: the replay position during recovery, where
    /// it stopped once a standby was promoted, NULL on a server that never recovered.
    pub(super) replay: Option<Lsn>,
}

/// A primary that never recovered.
pub(super) const PRIMARY: Role = Role {
    in_recovery: false,
    replay: None,
};

impl Backend {
    /// Listens as a server in `role`.
    pub(super) async fn start(role: Role) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let cancels = Arc::new(AtomicUsize::new(0));
        let answer = Arc::new(Notify::new());
        let (c, a) = (cancels.clone(), answer.clone());
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(serve(sock, role, c.clone(), a.clone()));
            }
        });
        Backend {
            port,
            cancels,
            answer,
        }
    }

    /// Lets the CancelRequests received so far (and the next one) end.
    pub(super) fn answer_cancels(&self) {
        self.answer.notify_waiters();
        self.answer.notify_one();
    }
}

async fn serve(mut sock: TcpStream, role: Role, cancels: Arc<AtomicUsize>, answer: Arc<Notify>) {
    let mut len = [0u8; 4];
    if sock.read_exact(&mut len).await.is_err() {
        return;
    }
    let mut body = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
    if sock.read_exact(&mut body).await.is_err() || body.len() < 4 {
        return;
    }
    if u32::from_be_bytes([body[0], body[1], body[2], body[3]]) == CANCEL_REQUEST {
        cancels.fetch_add(1, Ordering::SeqCst);
        // Closing the connection is how a server says the cancel was handled.
        answer.notified().await;
        return;
    }
    let mut out = BytesMut::new();
    let _ = Authentication::Ok.encode(&mut out);
    let standby = if role.in_recovery { "on" } else { "off" };
    for (name, value) in [
        ("server_version", "18.1"),
        ("in_hot_standby", standby),
        ("default_transaction_read_only", standby),
    ] {
        let ps = ParameterStatus {
            name: name.as_bytes(),
            value: value.as_bytes(),
        };
        let _ = ps.encode(&mut out);
    }
    let key = BackendKeyData {
        pid: 4242,
        key: &[1, 2, 3, 4],
    };
    let _ = key.encode(&mut out);
    encode_ready_for_query(TransactionStatus::Idle, &mut out);
    if sock.write_all(&out).await.is_err() {
        return;
    }
    // Queries, until Terminate or EOF.
    let mut head = [0u8; 5];
    while sock.read_exact(&mut head).await.is_ok() && head[0] != b'X' {
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; len.saturating_sub(4)];
        if sock.read_exact(&mut body).await.is_err() {
            return;
        }
        let sql = String::from_utf8_lossy(body.strip_suffix(&[0]).unwrap_or(&body)).into_owned();
        if head[0] == b'Q' && sock.write_all(&answer_query(role, &sql)).await.is_err() {
            return;
        }
    }
}

/// The answer to the replay-position queries (any other query gets no rows).
fn answer_query(role: Role, sql: &str) -> BytesMut {
    let mut out = BytesMut::new();
    let column = FieldDescription {
        name: b"pg_last_wal_replay_lsn",
        table_oid: 0,
        column_id: 0,
        type_oid: 3220,
        type_size: 8,
        type_modifier: -1,
        format: 0,
    };
    let _ = encode_row_description(&[column], &mut out);
    let asks_replay = sql.contains("pg_last_wal_replay_lsn()");
    // `… WHERE pg_catalog.pg_is_in_recovery()` has no row outside recovery.
    let row = asks_replay && (role.in_recovery || !sql.contains("pg_is_in_recovery()"));
    if row {
        let text = role.replay.map(|l| l.to_string());
        let _ = encode_data_row(&[text.as_deref().map(str::as_bytes)], &mut out);
    }
    let tag: &[u8] = if row { b"SELECT 1" } else { b"SELECT 0" };
    let _ = encode_command_complete(tag, &mut out);
    encode_ready_for_query(TransactionStatus::Idle, &mut out);
    out
}
