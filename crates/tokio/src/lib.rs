//! A tokio adapter: drives the pure pgyard-connect machine over async sockets and rustls.
