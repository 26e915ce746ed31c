//! A blocking adapter: drives the pure pgyard-connect machine over std sockets and rustls.
