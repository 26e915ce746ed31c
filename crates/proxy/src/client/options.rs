//! A StartupMessage's `options`: the server's own command-line switches for one session
//! (libpq's `options`, `PGOPTIONS`; Django's `'options': '-c search_path=app'`). A server
//! splits the text into words on white space, a backslash taking the character after it as
//! it is, and reads them with the C library's `getopt` over its switch list. glibc's
//! `getopt` moves words that are not switches to the end, so switches after such a word are
//! still read, and the first such word is then refused.
//!
//! Two switches name a setting, `-c name=value` and `--name=value` (dashes in the name read
//! as underscores, names in any case), and `-e` sets `DateStyle` to `euro`. The proxy takes
//! those of the settings it tracks (see `params`); the other switches and settings are
//! ignored, as other startup parameters are. Text a server would refuse before it looks at a
//! setting's name is refused with the server's words.

/// The switches of PostgreSQL's `getopt` string that take an argument (`-` is `--name`).
const WITH_ARGUMENT: &[u8] = b"BCcDdfhkNprStvW-";

/// The switches that take none.
const WITHOUT_ARGUMENT: &[u8] = b"bEeFijlnOPsT";

/// How a server ends a login whose `options` it cannot read: FATAL with these fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionsError {
    /// The SQLSTATE.
    pub code: &'static [u8],
    /// The server's message.
    pub message: String,
    /// The server's hint, where it gives one.
    pub hint: Option<&'static str>,
}

/// A word the server's switch reader refuses.
fn invalid(word: &str) -> OptionsError {
    OptionsError {
        code: b"42601",
        message: format!("invalid command-line argument for server process: {word}"),
        hint: Some("Try \"postgres --help\" for more information."),
    }
}

/// The words of `text` as the server splits them.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut chars = text.chars();
    let mut open = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                // A backslash at the very end takes nothing.
                if let Some(next) = chars.next() {
                    word.push(next);
                }
                open = true;
            }
            ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c' => {
                if open {
                    out.push(std::mem::take(&mut word));
                    open = false;
                }
            }
            _ => {
                word.push(c);
                open = true;
            }
        }
    }
    if open {
        out.push(word);
    }
    out
}

/// The settings `options` gives, in order (a later one of a name wins), each name with its
/// dashes read as underscores; or the error the server would end the login with.
pub fn settings(text: &str) -> Result<Vec<(String, String)>, OptionsError> {
    let words = words(text);
    let mut found = Vec::new();
    let mut first_operand: Option<usize> = None;
    let mut i = 0;
    while i < words.len() {
        let word = &words[i];
        if word == "--" {
            // The end of the switches: whatever follows is an operand.
            if i + 1 < words.len() {
                first_operand.get_or_insert(i + 1);
            }
            break;
        }
        if !word.starts_with('-') || word == "-" {
            first_operand.get_or_insert(i);
            i += 1;
            continue;
        }
        i += 1 + usize::from(switches(&words, i, &mut found)?);
    }
    match first_operand {
        Some(k) => Err(invalid(&words[k])),
        None => Ok(found),
    }
}

/// Reads the switches of word `i` into `found`; whether it took the next word as an argument.
fn switches(
    words: &[String],
    i: usize,
    found: &mut Vec<(String, String)>,
) -> Result<bool, OptionsError> {
    let word = &words[i];
    let bytes = word.as_bytes();
    for (j, &c) in bytes.iter().enumerate().skip(1) {
        let last = j + 1 == bytes.len();
        if WITH_ARGUMENT.contains(&c) {
            // The switch is ASCII, so the rest of the word starts on a character boundary.
            let (arg, took_next) = match word.get(j + 1..) {
                Some(rest) if !rest.is_empty() => (rest, false),
                _ => match words.get(i + 1) {
                    Some(next) => (next.as_str(), true),
                    None => return Err(invalid(word)),
                },
            };
            if c == b'c' || c == b'-' {
                found.push(named(c, arg)?);
            }
            return Ok(took_next);
        }
        if !WITHOUT_ARGUMENT.contains(&c) {
            // getopt has not moved past a word it stopped inside, so the server names the
            // word before it (its own name before the first).
            let named = if last {
                word.as_str()
            } else {
                i.checked_sub(1)
                    .and_then(|p| words.get(p))
                    .map_or("postgres", String::as_str)
            };
            return Err(invalid(named));
        }
        if c == b'e' {
            found.push(("DateStyle".to_owned(), "euro".to_owned()));
        }
    }
    Ok(false)
}

/// `-c name=value` (`flag` `c`) or `--name=value` (`flag` `-`).
fn named(flag: u8, arg: &str) -> Result<(String, String), OptionsError> {
    let Some((name, value)) = arg.split_once('=') else {
        let shown = if flag == b'c' { "-c " } else { "--" };
        return Err(OptionsError {
            code: b"42601",
            message: format!("{shown}{arg} requires a value"),
            hint: None,
        });
    };
    if name.is_empty() {
        return Err(OptionsError {
            code: b"42704",
            message: "unrecognized configuration parameter \"\"".to_owned(),
            hint: None,
        });
    }
    Ok((name.replace('-', "_"), value.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Vec<(String, String)> {
        settings(text).unwrap_or_else(|e| panic!("{text:?}: {e:?}"))
    }

    fn refused(text: &str) -> (String, String) {
        let e = settings(text).expect_err(text);
        (String::from_utf8_lossy(e.code).into_owned(), e.message)
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn words_split_on_white_space_with_backslash_escapes() {
        assert_eq!(words(r"  -c   a=my\ app  "), ["-c", "a=my app"]);
        assert_eq!(words(r"a\\b x\"), [r"a\b", "x"]);
        assert_eq!(words("\t\n"), Vec::<String>::new());
        assert_eq!(words(r"\ "), [" "]);
    }

    #[test]
    fn settings_come_from_c_long_and_e_switches_as_the_server_reads_them() {
        assert_eq!(
            ok(r"-c search_path=s1 -c application_name=my\ app --DateStyle=German"),
            pairs(&[
                ("search_path", "s1"),
                ("application_name", "my app"),
                ("DateStyle", "German")
            ])
        );
        assert_eq!(ok("-csearch_path=x"), pairs(&[("search_path", "x")]));
        assert_eq!(
            ok("--default-transaction-read-only=on -c a-b=1=2"),
            pairs(&[("default_transaction_read_only", "on"), ("a_b", "1=2")])
        );
        assert_eq!(
            ok("-ec application_name=g -E -j -d 5 --"),
            pairs(&[("DateStyle", "euro"), ("application_name", "g")])
        );
        assert_eq!(ok("-c -x=1"), pairs(&[("_x", "1")]));
        assert_eq!(ok(""), pairs(&[]));
    }

    #[test]
    fn refusals_carry_the_servers_words() {
        let invalid = |w: &str| {
            (
                "42601".to_owned(),
                format!("invalid command-line argument for server process: {w}"),
            )
        };
        let requires = |w: &str| ("42601".to_owned(), format!("{w} requires a value"));
        assert_eq!(refused("-c foo"), requires("-c foo"));
        assert_eq!(refused("--foo"), requires("--foo"));
        assert_eq!(refused("-cE"), requires("-c E"));
        assert_eq!(refused("abc -c foo"), requires("-c foo"));
        assert_eq!(refused("-c"), invalid("-c"));
        assert_eq!(refused("-c application_name=1 -c"), invalid("-c"));
        assert_eq!(refused("-z -c foo"), invalid("-z"));
        assert_eq!(refused("-ez"), invalid("-ez"));
        assert_eq!(refused("-zc foo"), invalid("postgres"));
        assert_eq!(refused("x -zc"), invalid("x"));
        assert_eq!(refused("abc -c application_name=zz"), invalid("abc"));
        assert_eq!(refused("-- -c application_name=q"), invalid("-c"));
        assert_eq!(refused("abc -- def"), invalid("abc"));
        assert_eq!(refused("-"), invalid("-"));
        assert_eq!(refused("- -z"), invalid("-z"));
        assert_eq!(refused(r"x\"), invalid("x"));
        let unnamed = (
            "42704".to_owned(),
            "unrecognized configuration parameter \"\"".to_owned(),
        );
        assert_eq!(refused("-c =x"), unnamed);
        assert_eq!(refused("--=x"), unnamed);
        let hint = settings("-z").expect_err("-z").hint;
        assert_eq!(hint, Some("Try \"postgres --help\" for more information."));
    }
}
