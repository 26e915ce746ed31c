//! The driver core between the connect machine and an adapter: the I/O it asks for, the
//! reports it takes, the bookkeeping it keeps, all without sockets or clocks.

use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Duration;

use bytes::BytesMut;
use pgyard_connect::{Connector, Event, IoErrorKind, OpenTarget};
use pgyard_conninfo::resolve::Environment;
use pgyard_conninfo::typed::{ConnectConfig, Context};
use pgyard_driver::core::{Core, Io, Step, WorkerCmd};
use pgyard_driver::tls::TlsSettings;
use pgyard_driver::{Attempt, Clock, DriverConfig, Error, ErrorKind, Machine};
use pgyard_types::Instant;
use pgyard_wire::backend;

/// A machine on virtual time: the tests pass every instant to the core themselves.
fn machine(conninfo: &str) -> Machine {
    let info = pgyard_conninfo::parse(conninfo).expect("test conninfo parses");
    let config = ConnectConfig::from_resolved(&info, &Context::new().with_os_user("u"))
        .expect("valid config");
    let tls = TlsSettings::new(&config, &Environment::new());
    Machine {
        connector: Box::new(Connector::new(config, Instant::ZERO, 7)),
        clock: Clock::new(),
        driver: DriverConfig {
            tls,
            connect_bound: None,
        },
    }
}

/// What a trust login sends: AuthenticationOk, one parameter, the key, ReadyForQuery.
fn trust_login() -> Vec<u8> {
    let mut out = BytesMut::new();
    backend::Authentication::Ok
        .encode(&mut out)
        .expect("encode");
    backend::ParameterStatus {
        name: b"in_hot_standby",
        value: b"off",
    }
    .encode(&mut out)
    .expect("encode");
    backend::BackendKeyData {
        pid: 42,
        key: &[1, 2, 3, 4],
    }
    .encode(&mut out)
    .expect("encode");
    backend::encode_ready_for_query(backend::TransactionStatus::Idle, &mut out);
    out.to_vec()
}

fn at_ms(ms: u64) -> Instant {
    Instant(ms * 1_000_000)
}

type TestCore<'a> = Core<Sender<WorkerCmd>, &'a TlsSettings>;

/// Registers a worker for `attempt` whose commands the test reads.
fn worker(core: &mut TestCore<'_>, attempt: pgyard_connect::AttemptId) -> Receiver<WorkerCmd> {
    let (tx, rx) = mpsc::channel();
    core.spawned(attempt, tx);
    rx
}

#[test]
fn a_name_resolves_opens_logs_in_and_wins() {
    let mut m = machine("host=db.example port=5433 dbname=d user=u sslmode=disable");
    let mut core: TestCore = Core::new(&m.driver.tls, None);
    let Step::Io(Io::Resolve { token, host, port }) = core.step(&mut m.connector, at_ms(0)) else {
        panic!("a host name is resolved first")
    };
    assert_eq!((host.as_str(), port), ("db.example", 5433));
    let addr = "10.0.0.9:5433".parse().expect("addr");
    core.resolved(
        &mut m.connector,
        at_ms(1),
        token,
        "db.example",
        Ok(vec![addr]),
    );
    let Step::Io(Io::Open {
        attempt, target, ..
    }) = core.step(&mut m.connector, at_ms(2))
    else {
        panic!("then the address is opened")
    };
    assert_eq!(target, OpenTarget::Tcp(addr));
    let cmds = worker(&mut core, attempt);
    assert!(matches!(
        core.step(&mut m.connector, at_ms(2)),
        Step::Wait { within: None }
    ));
    core.report(&mut m.connector, at_ms(5), Event::Opened { attempt });
    assert!(matches!(
        core.step(&mut m.connector, at_ms(5)),
        Step::Wait { within: None }
    ));
    let Ok(WorkerCmd::Send(startup)) = cmds.try_recv() else {
        panic!("the startup packet goes to the attempt's worker")
    };
    assert!(startup.windows(2).any(|w| w == b"d\0"));
    core.report(
        &mut m.connector,
        at_ms(9),
        Event::Received {
            attempt,
            bytes: trust_login(),
        },
    );
    let Step::Won(est) = core.step(&mut m.connector, at_ms(9)) else {
        panic!("a trust login wins")
    };
    assert_eq!(est.attempt, attempt);
    assert!(matches!(cmds.try_recv(), Ok(WorkerCmd::Handover)));
    assert_eq!(est.host, "db.example");
    let log = core.take_attempts();
    let expected = Attempt {
        host: "db.example".into(),
        target: OpenTarget::Tcp(addr),
        started: Duration::from_millis(2),
        ended: Some(Duration::from_millis(9)),
        outcome: "connected".into(),
    };
    assert_eq!(log, vec![expected]);
}

#[test]
fn failures_carry_libpqs_text_and_their_kind() {
    // The resolver's error arrives as Rust prints it; the machine words it as libpq.
    let mut m = machine("host=nowhere.invalid port=5432");
    let mut core: TestCore = Core::new(&m.driver.tls, None);
    let Step::Io(Io::Resolve { token, .. }) = core.step(&mut m.connector, at_ms(0)) else {
        panic!("resolve first")
    };
    let rust_text = "failed to lookup address information: Name or service not known";
    core.resolved(
        &mut m.connector,
        at_ms(1),
        token,
        "nowhere.invalid",
        Err(rust_text.into()),
    );
    let Step::Failed(e) = core.step(&mut m.connector, at_ms(1)) else {
        panic!("nothing else to try")
    };
    assert_eq!(
        e.to_string(),
        "could not translate host name \"nowhere.invalid\" to address: Name or service not known\n"
    );
    assert!(e.kind().is_retryable());

    // A refused connection: the attempt log keeps strerror's text.
    let mut m = machine("host=127.0.0.1 port=1");
    let mut core: TestCore = Core::new(&m.driver.tls, None);
    let Step::Io(Io::Open { attempt, .. }) = core.step(&mut m.connector, at_ms(0)) else {
        panic!("open")
    };
    let cmds = worker(&mut core, attempt);
    core.report(
        &mut m.connector,
        at_ms(1),
        Event::OpenFailed {
            attempt,
            error: IoErrorKind::ConnectionRefused,
        },
    );
    let Step::Failed(Error::Connect(e)) = core.step(&mut m.connector, at_ms(1)) else {
        panic!("the connect fails")
    };
    assert!(matches!(cmds.try_recv(), Ok(WorkerCmd::Close)));
    assert_eq!(e.kind(), ErrorKind::Transient);
    let log = core.take_attempts();
    assert!(log[0].outcome.starts_with("Connection refused"), "{log:?}");
}

#[test]
fn the_machines_deadline_is_waited_for_then_handled() {
    let mut m = machine("host=127.0.0.1 port=5432 connect_timeout=2");
    let mut core: TestCore = Core::new(&m.driver.tls, None);
    let Step::Io(Io::Open { attempt, .. }) = core.step(&mut m.connector, at_ms(0)) else {
        panic!("open")
    };
    let cmds = worker(&mut core, attempt);
    let Step::Wait { within: Some(d) } = core.step(&mut m.connector, at_ms(500)) else {
        panic!("the attempt's connect_timeout is pending")
    };
    assert_eq!(d, Duration::from_millis(1500));
    let Step::Failed(e) = core.step(&mut m.connector, at_ms(2000)) else {
        panic!("timed out")
    };
    assert!(matches!(cmds.try_recv(), Ok(WorkerCmd::Close)));
    assert!(e.to_string().ends_with("timeout expired\n"), "{e}");
}

#[test]
fn a_tls_configuration_that_cannot_be_built_fails_the_attempt_with_its_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-root.crt");
    let mut m = machine(&format!(
        "host=127.0.0.1 port=5432 sslmode=verify-ca sslrootcert={}",
        missing.display()
    ));
    let mut core: TestCore = Core::new(&m.driver.tls, None);
    let Step::Io(Io::Open { attempt, .. }) = core.step(&mut m.connector, at_ms(0)) else {
        panic!("open")
    };
    let cmds = worker(&mut core, attempt);
    core.report(&mut m.connector, at_ms(1), Event::Opened { attempt });
    assert!(matches!(
        core.step(&mut m.connector, at_ms(1)),
        Step::Wait { .. }
    ));
    assert!(matches!(cmds.try_recv(), Ok(WorkerCmd::Send(_))));
    core.report(
        &mut m.connector,
        at_ms(2),
        Event::Received {
            attempt,
            bytes: b"S".to_vec(),
        },
    );
    let Step::Failed(e) = core.step(&mut m.connector, at_ms(2)) else {
        panic!("failed")
    };
    // No StartTls reached the worker: the core failed the attempt itself.
    assert!(matches!(cmds.try_recv(), Ok(WorkerCmd::Close)));
    assert!(
        e.to_string().contains("root certificate file")
            && e.to_string().contains(&missing.display().to_string()),
        "{e}"
    );
    assert_eq!(e.kind(), ErrorKind::Configuration);
}

#[test]
fn a_reset_terminates_and_closes_the_held_connection() {
    let mut m = machine("host=127.0.0.1 port=5432 sslmode=disable");
    let won = {
        let mut core: TestCore = Core::new(&m.driver.tls, None);
        let Step::Io(Io::Open { attempt, .. }) = core.step(&mut m.connector, at_ms(0)) else {
            panic!("open")
        };
        let _cmds = worker(&mut core, attempt);
        core.report(&mut m.connector, at_ms(1), Event::Opened { attempt });
        assert!(matches!(
            core.step(&mut m.connector, at_ms(1)),
            Step::Wait { .. }
        ));
        core.report(
            &mut m.connector,
            at_ms(2),
            Event::Received {
                attempt,
                bytes: trust_login(),
            },
        );
        match core.step(&mut m.connector, at_ms(2)) {
            Step::Won(est) => est.attempt,
            other => panic!("won expected, got {other:?}"),
        }
    };
    m.connector.reset(at_ms(10));
    let mut core: TestCore = Core::new(&m.driver.tls, Some(won));
    let Step::Io(Io::SendHeld { bytes }) = core.step(&mut m.connector, at_ms(10)) else {
        panic!("Terminate goes to the held connection, not to a worker")
    };
    assert_eq!(bytes, [b'X', 0, 0, 0, 4]);
    assert!(matches!(
        core.step(&mut m.connector, at_ms(10)),
        Step::Io(Io::CloseHeld)
    ));
    assert!(matches!(
        core.step(&mut m.connector, at_ms(10)),
        Step::Io(Io::Open { .. })
    ));
}
