//! The PostgreSQL frontend/backend protocol (3.0 and 3.2) as a pure, zero-copy codec: an
//! incremental frame decoder, every message of both directions (decode borrows from the
//! frame, encode writes into `BytesMut`), error fields and SQLSTATEs, the authentication
//! exchanges as sans-IO state machines, the streaming-replication sub-protocol, logical
//! replication's pgoutput, and the proposed middleware message with its splitter.
//!
//! It knows bytes and messages, never sockets or clocks, so one codec serves a client driver,
//! a proxy (which decodes both directions and re-encodes what it relays), a replication
//! consumer and the simulator that plays servers. pgyard-connect builds its connect machine
//! on it; `examples/minimal_client.rs` is a whole blocking client on this crate alone.
//!
//! ```
//! use bytes::BytesMut;
//! use pgyard_wire::backend::{self, BackendMessage, FieldDescription, TransactionStatus};
//! use pgyard_wire::frame::{decode_frame, Decoded, FrameDecoder, Limits, UnitRef};
//! use pgyard_wire::frontend::{self, FrontendMessage};
//!
//! // A client encodes a Query; a server or a proxy decodes it, borrowing the SQL text.
//! let mut query = BytesMut::new();
//! frontend::encode_query(b"select 1 as one", &mut query)?;
//! let Decoded::Frame(frame) = decode_frame(&query, usize::MAX)? else { unreachable!() };
//! let decoded = FrontendMessage::decode(frame.tag, frame.body)?;
//! assert_eq!(decoded, FrontendMessage::Query(b"select 1 as one"));
//!
//! // The server's answer, written with the backend encoders (as the simulator plays servers).
//! let mut reply = BytesMut::new();
//! let int4 = FieldDescription {
//!     name: b"one", table_oid: 0, column_id: 0, type_oid: 23, type_size: 4,
//!     type_modifier: -1, format: 0,
//! };
//! backend::encode_row_description(&[int4], &mut reply)?;
//! backend::encode_data_row(&[Some(&b"1"[..])], &mut reply)?;
//! backend::encode_command_complete(b"SELECT 1", &mut reply)?;
//! backend::encode_ready_for_query(TransactionStatus::Idle, &mut reply);
//!
//! // Bytes arrive in any split; the client's decoder yields whole frames only.
//! let mut decoder = FrameDecoder::backend(Limits::libpq_client());
//! let (first, rest) = reply.split_at(7);
//! decoder.feed(first);
//! assert!(matches!(decoder.decode_ref()?, Decoded::NeedMore { .. }));
//! decoder.feed(rest);
//! let mut rows = Vec::new();
//! while let Decoded::Frame(UnitRef::Typed(frame)) = decoder.decode_ref()? {
//!     match BackendMessage::decode(frame.tag, frame.body)? {
//!         // Values borrow from the decoder's buffer; copy what outlives the frame.
//!         BackendMessage::DataRow(row) => {
//!             rows.extend(row.fields().map(|v| v.map(<[u8]>::to_vec)))
//!         }
//!         BackendMessage::CommandComplete(tag) => assert_eq!(tag, b"SELECT 1"),
//!         BackendMessage::ReadyForQuery(status) => assert_eq!(status, TransactionStatus::Idle),
//!         _ => {}
//!     }
//! }
//! assert_eq!(rows, [Some(b"1".to_vec())]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod buf;

pub use buf::{DecodeError, Reader};
#[cfg(feature = "arbitrary")]
pub mod arb;
pub mod auth;
pub mod backend;
pub mod der;
pub mod describe;
pub mod error_fields;
pub mod frame;
pub mod frontend;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod middleware;
pub mod pgoutput;
pub mod replication;
