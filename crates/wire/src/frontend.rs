//! Frontend (client → server) messages: typed decode borrowing from the frame, encode into `BytesMut`.
