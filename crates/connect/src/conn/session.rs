//! The server's role: ParameterStatus values as they arrive, and the `target_session_attrs`
//! check run once the server is ready (a query when the reported values do not settle it).

use bytes::BytesMut;
use pgyard_conninfo::typed::TargetSessionAttrs;
use pgyard_wire::error_fields::{ConnectStage, SqlState};
use pgyard_wire::frontend;

use super::{terminate_bytes, Conn, FailClass, Out, State, Verdict};
use crate::kinds;
use crate::report::FailureKind;
use crate::{BackendKey, Parameters};

/// Three-valued server state from ParameterStatus (libpq's `PGTernaryBool`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum Tri {
    #[default]
    Unknown,
    Yes,
    No,
}

impl Tri {
    fn from_on(value: &[u8]) -> Tri {
        if value == b"on" {
            Tri::Yes
        } else {
            Tri::No
        }
    }
}

/// What the server role looked like, when the check learned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerRole {
    /// Not in hot standby, sessions writable by default.
    Primary,
    /// In hot standby (or read-only by default).
    Standby,
}

/// The session check a connection must pass in its pass (prefer-* already mapped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    Any,
    ReadWrite,
    ReadOnly,
    Primary,
    Standby,
}

impl Check {
    /// The check for `tsa` in pass 1 (`second_pass` false) or pass 2.
    pub(crate) fn for_pass(tsa: TargetSessionAttrs, second_pass: bool) -> Check {
        match tsa {
            TargetSessionAttrs::ReadWrite => Check::ReadWrite,
            TargetSessionAttrs::ReadOnly => Check::ReadOnly,
            TargetSessionAttrs::Primary => Check::Primary,
            TargetSessionAttrs::Standby => Check::Standby,
            TargetSessionAttrs::PreferStandby if !second_pass => Check::Standby,
            TargetSessionAttrs::PreferPrimary if !second_pass => Check::Primary,
            _ => Check::Any,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CheckQuery {
    ShowReadOnly,
    InRecovery,
}

impl CheckQuery {
    fn sql(self) -> &'static [u8] {
        match self {
            CheckQuery::ShowReadOnly => b"SHOW transaction_read_only",
            CheckQuery::InRecovery => b"SELECT pg_catalog.pg_is_in_recovery()",
        }
    }
    pub(super) fn failed_line(self) -> &'static str {
        match self {
            CheckQuery::ShowReadOnly => "\"SHOW transaction_read_only\" failed\n",
            CheckQuery::InRecovery => "\"SELECT pg_is_in_recovery()\" failed\n",
        }
    }
}

impl Conn {
    fn set_parameter(&mut self, name: &[u8], value: &[u8]) {
        match name {
            b"in_hot_standby" => self.in_hot_standby = Tri::from_on(value),
            b"default_transaction_read_only" => self.dtro = Tri::from_on(value),
            b"server_version" => self.sversion = parse_server_version(value),
            _ => {}
        }
        if self.reported.is_empty() {
            // A server reports about fifteen, some 300 bytes: grow once, not five times.
            self.reported.reserve(16, 384);
        }
        // Both were cut from the message at NULs.
        self.reported.set_reported(name, value);
    }

    /// The parameters the server reported, in the order each name first came, each with
    /// the last value reported for it.
    pub(crate) fn take_parameters(&mut self) -> Parameters {
        std::mem::take(&mut self.reported)
    }

    fn parameter_status(&mut self, body: &[u8]) {
        let mut parts = body.split(|&b| b == 0);
        if let (Some(n), Some(v)) = (parts.next(), parts.next()) {
            self.set_parameter(n, v);
        }
    }

    pub(super) fn on_ready_phase(&mut self, tag: u8, body: &[u8], out: &mut Vec<Out>) -> Verdict {
        match tag {
            b'S' => {
                self.parameter_status(body);
                Verdict::Pending
            }
            b'K' => {
                if body.len() < 5 {
                    return self.broken("received invalid BackendKeyData message\n");
                }
                let pid = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
                self.backend_key = Some(BackendKey {
                    pid,
                    key: body[4..].to_vec(),
                });
                Verdict::Pending
            }
            b'N' => Verdict::Pending,
            b'E' => {
                let (text, code) = self.refusal(body);
                let class = if self.params.appname_retry && code == Some(SqlState::UNDEFINED_OBJECT)
                {
                    FailClass::WithoutAppName
                } else {
                    FailClass::for_startup_error(code, ConnectStage::AfterAuthOk)
                };
                self.fail(class, kinds::server_error(code), &text)
            }
            b'Z' => self.check_target(out),
            other => {
                let m = format!(
                    "unexpected message type \"{}\" during startup\n",
                    char::from(other)
                );
                self.broken(&m)
            }
        }
    }

    fn read_only_server(&self) -> bool {
        #[cfg(feature = "planted-bugs")]
        if self.ignore_dtro {
            return self.in_hot_standby == Tri::Yes;
        }
        self.dtro == Tri::Yes || self.in_hot_standby == Tri::Yes
    }

    fn check_target(&mut self, out: &mut Vec<Out>) -> Verdict {
        // Learn the role for the caller's host memory when it is already known.
        if self.in_hot_standby != Tri::Unknown {
            self.role = Some(if self.in_hot_standby == Tri::Yes {
                ServerRole::Standby
            } else {
                ServerRole::Primary
            });
        }
        #[cfg(feature = "planted-bugs")]
        if self.ignore_check {
            self.state = State::Finished;
            return Verdict::Qualified;
        }
        let reject = match self.params.check {
            Check::Any => None,
            Check::ReadWrite | Check::ReadOnly => {
                if self.dtro == Tri::Unknown || self.in_hot_standby == Tri::Unknown {
                    return self.send_check(CheckQuery::ShowReadOnly, out);
                }
                let ro = self.read_only_server();
                if self.params.check == Check::ReadWrite && ro {
                    Some("session is read-only\n")
                } else if self.params.check == Check::ReadOnly && !ro {
                    Some("session is not read-only\n")
                } else {
                    None
                }
            }
            Check::Primary | Check::Standby => {
                if self.sversion < 90000 {
                    self.in_hot_standby = Tri::No;
                }
                if self.in_hot_standby == Tri::Unknown {
                    return self.send_check(CheckQuery::InRecovery, out);
                }
                if self.params.check == Check::Primary && self.in_hot_standby == Tri::Yes {
                    Some("server is in hot standby mode\n")
                } else if self.params.check == Check::Standby && self.in_hot_standby == Tri::No {
                    Some("server is not in hot standby mode\n")
                } else {
                    None
                }
            }
        };
        match reject {
            None => {
                self.state = State::Finished;
                Verdict::Qualified
            }
            Some(m) => {
                out.push(Out::Send(terminate_bytes()));
                // A server of the wrong role now may be the right one after a failover.
                self.fail(FailClass::Mismatch, FailureKind::Transient, m)
            }
        }
    }

    fn send_check(&mut self, query: CheckQuery, out: &mut Vec<Out>) -> Verdict {
        let mut b = BytesMut::new();
        if frontend::encode_query(query.sql(), &mut b).is_err() {
            // The check queries are constants that always encode; reaching this is a bug.
            return self.broken(query.failed_line());
        }
        out.push(Out::Send(Vec::from(b)));
        self.state = State::AwaitCheck {
            query,
            rows: 0,
            value: None,
            error: None,
        };
        Verdict::Pending
    }

    pub(super) fn on_check_phase(&mut self, tag: u8, body: &[u8], out: &mut Vec<Out>) -> Verdict {
        let State::AwaitCheck {
            query,
            rows,
            value,
            error,
        } = &mut self.state
        else {
            return Verdict::Pending;
        };
        let query = *query;
        match tag {
            b'D' => {
                *rows += 1;
                if *rows == 1 {
                    *value = first_column(body);
                }
            }
            b'E' => {
                let (text, code) = Self::render_error(body);
                *error = Some(kinds::server_error(code));
                self.messages.push_str(&text);
            }
            b'S' => self.parameter_status(body),
            b'Z' => {
                let ok = error.is_none() && *rows == 1;
                // No error but not one usable row: the server answered nonsense.
                let kind = error.unwrap_or(FailureKind::Protocol);
                let v = value.take();
                match (ok, v) {
                    (true, Some(v)) => {
                        self.learn_role(query, &v);
                        return self.check_target(out);
                    }
                    _ => {
                        out.push(Out::Send(terminate_bytes()));
                        return self.fail(FailClass::Mismatch, kind, query.failed_line());
                    }
                }
            }
            _ => {}
        }
        Verdict::Pending
    }

    /// Takes the check query's answer `value` as the role state it reports.
    fn learn_role(&mut self, query: CheckQuery, value: &[u8]) {
        match query {
            CheckQuery::ShowReadOnly => {
                let t = if value.starts_with(b"on") {
                    Tri::Yes
                } else {
                    Tri::No
                };
                self.dtro = t;
                self.in_hot_standby = t;
            }
            CheckQuery::InRecovery => {
                self.in_hot_standby = if value.starts_with(b"t") {
                    Tri::Yes
                } else {
                    Tri::No
                };
            }
        }
    }
}

/// The first column of a DataRow body; `None` if NULL or malformed.
fn first_column(body: &[u8]) -> Option<Vec<u8>> {
    let n = i16::from_be_bytes([*body.first()?, *body.get(1)?]);
    if n < 1 {
        return None;
    }
    let len = i32::from_be_bytes([*body.get(2)?, *body.get(3)?, *body.get(4)?, *body.get(5)?]);
    let len = usize::try_from(len).ok()?;
    body.get(6..6 + len).map(<[u8]>::to_vec)
}

/// libpq's numeric server version from the `server_version` text (0 when unparsable): up to
/// three dot-separated numbers. Read straight from the bytes (every connection parses it): a
/// byte that is not ASCII is neither a digit nor a dot, as its replacement character would
/// not be either.
pub(crate) fn parse_server_version(value: &[u8]) -> i32 {
    let mut nums = [0i32; 3];
    let mut count = 0;
    let mut rest = value;
    while count < 3 {
        let len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if len == 0 {
            break;
        }
        let parsed = rest[..len].iter().try_fold(0i32, |n, &d| {
            n.checked_mul(10)?.checked_add(i32::from(d - b'0'))
        });
        let Some(n) = parsed else { break };
        nums[count] = n;
        count += 1;
        rest = &rest[len..];
        match rest.strip_prefix(b".") {
            Some(r) => rest = r,
            None => break,
        }
    }
    match &nums[..count] {
        [maj, min, rev] if *maj < 10 => maj * 10000 + min * 100 + rev,
        [maj, min, ..] if *maj >= 10 => maj * 10000 + min,
        [maj, min, ..] => maj * 10000 + min * 100,
        [maj] => maj * 10000,
        _ => 0,
    }
}
