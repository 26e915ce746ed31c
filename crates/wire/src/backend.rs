//! Backend (server → client) messages: typed decode borrowing from the frame, encode into `BytesMut`.
