//! ErrorResponse/NoticeResponse fields, SQLSTATE constants and the failover classification.
