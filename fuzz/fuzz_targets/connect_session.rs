//! Fuzz target `connect_session`: `pgyard_connect::fuzzing::session`, the connect machine
//! against well-formed servers and a network whose order and faults the input chooses.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    pgyard_connect::fuzzing::session(data);
});
