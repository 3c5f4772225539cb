//! `xbr run --config PATH`: settings from a file, one `key = value` a line,
//! where every key is a long flag of `xbr run` (`pmd-threads = 2` is
//! `--pmd-threads 2`).
//!
//! The keys are not listed here: they are taken from the clap command
//! itself, so a flag added to `xbr run` is a key of the file at once. A
//! line becomes `--key=value`; a flag that takes no value (clap's
//! `SetTrue`) is written `key = true` or `key = false`. A flag that may be
//! given more than once (`--port`) may be a key on several lines, in order.
//!
//! Flags win: a key whose flag is also on the command line is ignored, all
//! of its lines (so `--port a` replaces every `port = ...` of the file,
//! it is not added to them).
//!
//! Each line is checked on its own by clap's parser for that flag before
//! anything is merged, so a bad value is reported with the file, the line
//! and the key (exit 2, like a bad flag), never as a bare clap error about
//! a flag the operator did not type.
//!
//! Format: blank lines and lines starting with `#` are ignored; the value
//! is the rest of the line after `=`, trimmed; a value in double quotes
//! has them removed (so TOML-style `bridge = "br0"` reads the same). No
//! sections, no escapes, no inline comments (a `#` may be part of a value).

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command};
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The flag that names the file; it cannot be a key of the file.
pub const CONFIG_FLAG: &str = "config";

/// Files longer than this are refused (a configuration file is a few
/// dozen lines; this bounds what a wrong path can make xbr read).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

#[derive(Debug, Error)]
pub enum ConfFileError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: larger than {MAX_FILE_BYTES} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("{}:{line}: expected 'key = value'", path.display())]
    Syntax { path: PathBuf, line: usize },
    #[error("{}:{line}: unknown key '{key}'{hint}", path.display())]
    UnknownKey {
        path: PathBuf,
        line: usize,
        key: String,
        hint: String,
    },
    #[error("{}:{line}: key '{key}' is already given on line {first}", path.display())]
    Repeated {
        path: PathBuf,
        line: usize,
        key: String,
        first: usize,
    },
    #[error("{}:{line}: key '{key}': {reason}", path.display())]
    BadValue {
        path: PathBuf,
        line: usize,
        key: String,
        reason: String,
    },
    #[error("{}: the file's settings and the command line do not fit together: {reason}", path.display())]
    Combined { path: PathBuf, reason: String },
}

/// One `key = value` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub line: usize,
    pub key: String,
    pub value: String,
}

/// Splits `text` into entries (syntax only; keys are checked by
/// [`to_args`]).
pub fn parse(path: &Path, text: &str) -> Result<Vec<Entry>, ConfFileError> {
    let mut entries = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some((key, value)) = trimmed.split_once('=') else {
            return Err(ConfFileError::Syntax {
                path: path.to_path_buf(),
                line,
            });
        };
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(ConfFileError::Syntax {
                path: path.to_path_buf(),
                line,
            });
        }
        let mut value = value.trim();
        if value.len() >= 2 && value.starts_with('"') && value.ends_with('"') {
            value = &value[1..value.len() - 1];
        }
        entries.push(Entry {
            line,
            key: key.to_string(),
            value: value.to_string(),
        });
    }
    Ok(entries)
}

/// Reads and parses the file at `path`.
pub fn read(path: &Path) -> Result<Vec<Entry>, ConfFileError> {
    let err = |source| ConfFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(err)?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(ConfFileError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let text = std::fs::read_to_string(path).map_err(err)?;
    parse(path, &text)
}

/// The arguments (`--key=value`) the entries stand for, for the
/// subcommand `cmd`, leaving out the keys `given` (on the command line).
/// Every entry is checked: the key must be a long flag of `cmd` (not
/// `--config`), a flag given once must be on one line only, and the value
/// must pass the flag's own parser.
pub fn to_args(
    path: &Path,
    cmd: &Command,
    entries: &[Entry],
    given: &dyn Fn(&str) -> bool,
) -> Result<Vec<OsString>, ConfFileError> {
    let mut first_line: HashMap<&str, usize> = HashMap::new();
    let mut out = Vec::new();
    for e in entries {
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(e.key.as_str()) && e.key != CONFIG_FLAG);
        let Some(arg) = arg else {
            return Err(ConfFileError::UnknownKey {
                path: path.to_path_buf(),
                line: e.line,
                key: e.key.clone(),
                hint: hint(cmd, &e.key),
            });
        };
        let repeatable = matches!(arg.get_action(), ArgAction::Append);
        if let Some(first) = first_line.insert(&e.key, e.line) {
            if !repeatable {
                return Err(ConfFileError::Repeated {
                    path: path.to_path_buf(),
                    line: e.line,
                    key: e.key.clone(),
                    first,
                });
            }
        }
        let bad = |reason: String| ConfFileError::BadValue {
            path: path.to_path_buf(),
            line: e.line,
            key: e.key.clone(),
            reason,
        };
        let flag = format!("--{}", e.key);
        let one: Vec<OsString> = match arg.get_action() {
            ArgAction::SetTrue | ArgAction::SetFalse => match e.value.as_str() {
                "true" => vec![flag.into()],
                "false" => vec![],
                other => return Err(bad(format!("expected true or false, not '{other}'"))),
            },
            _ if arg.get_action().takes_values() => {
                if e.value.is_empty() {
                    return Err(bad("a value is required".into()));
                }
                vec![format!("{flag}={}", e.value).into()]
            }
            _ => return Err(bad("this flag cannot be set from a file".into())),
        };
        // The flag's own parser (and its possible values) on this value
        // alone, so the error names this line.
        let mut argv: Vec<OsString> = vec![cmd.get_name().into()];
        argv.extend(one.iter().cloned());
        if let Err(err) = cmd.clone().try_get_matches_from(argv) {
            return Err(bad(clap_reason(&err)));
        }
        if !given(arg.get_id().as_str()) {
            out.extend(one);
        }
    }
    Ok(out)
}

/// clap's message without its `error: ` prefix, usage and tip lines.
pub fn clap_reason(err: &clap::Error) -> String {
    let text = err.render().to_string();
    let first = text.lines().next().unwrap_or_default();
    first.trim_start_matches("error: ").trim().to_string()
}

/// " (did you mean 'x'?)" for a key spelled with underscores or in
/// another case, else empty.
fn hint(cmd: &Command, key: &str) -> String {
    let want = key.replace('_', "-").to_ascii_lowercase();
    cmd.get_arguments()
        .filter_map(|a| a.get_long())
        .find(|l| *l == want && *l != CONFIG_FLAG)
        .map(|l| format!(" (did you mean '{l}'?)"))
        .unwrap_or_default()
}

/// The command line `argv` (for `top`, whose subcommand `sub` may take
/// `--config`), with the file's settings inserted right after the
/// subcommand's name for the flags the command line does not give. `None`
/// when there is no file to apply.
pub fn merge_argv(
    top: &Command,
    matches: &ArgMatches,
    argv: &[OsString],
    sub: &str,
) -> Result<Option<Vec<OsString>>, ConfFileError> {
    let Some(sub_matches) = matches.subcommand_matches(sub) else {
        return Ok(None);
    };
    let Some(path) = sub_matches.get_one::<PathBuf>(CONFIG_FLAG) else {
        return Ok(None);
    };
    let Some(sub_cmd) = top.find_subcommand(sub) else {
        return Ok(None);
    };
    let entries = read(path)?;
    let given = |id: &str| matches!(sub_matches.value_source(id), Some(ValueSource::CommandLine));
    let extra = to_args(path, sub_cmd, &entries, &given)?;
    // The subcommand's name is the first argument equal to it (only
    // global flags such as --help, which exit, may come before it).
    let at = argv
        .iter()
        .skip(1)
        .position(|a| a == sub)
        .map(|i| i + 2)
        .unwrap_or(argv.len());
    let mut merged: Vec<OsString> = argv[..at].to_vec();
    merged.extend(extra);
    merged.extend_from_slice(&argv[at..]);
    Ok(Some(merged))
}

/// Parses `argv` as `P`, applying the file of `--config` of any of the
/// subcommands `subs`. Bad flags, `--help` and `--version` exit as clap
/// does; a bad file is an error naming it.
pub fn parse_cli<P: clap::Parser>(argv: Vec<OsString>, subs: &[&str]) -> Result<P, ConfFileError> {
    let top = P::command();
    let matches = top.clone().get_matches_from(argv.clone());
    for sub in subs {
        if let Some(merged) = merge_argv(&top, &matches, &argv, sub)? {
            let path = matches
                .subcommand_matches(sub)
                .and_then(|m| m.get_one::<PathBuf>(CONFIG_FLAG))
                .cloned()
                .unwrap_or_default();
            return P::try_parse_from(merged).map_err(|e| ConfFileError::Combined {
                path,
                reason: clap_reason(&e),
            });
        }
    }
    Ok(P::from_arg_matches(&matches).unwrap_or_else(|e| e.exit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction};

    fn run_cmd() -> Command {
        Command::new("run")
            .arg(Arg::new("bridge").long("bridge").default_value("br0"))
            .arg(
                Arg::new("pmd_threads")
                    .long("pmd-threads")
                    .value_parser(clap::value_parser!(u32).range(1..=64)),
            )
            .arg(Arg::new("ports").long("port").action(ArgAction::Append))
            .arg(
                Arg::new("verbose")
                    .long("verbose")
                    .action(ArgAction::SetTrue),
            )
            .arg(
                Arg::new("config")
                    .long("config")
                    .value_parser(clap::value_parser!(PathBuf)),
            )
    }

    fn top() -> Command {
        Command::new("xbr").subcommand(run_cmd())
    }

    fn p() -> PathBuf {
        PathBuf::from("/etc/xbr/xbr.conf")
    }

    fn args(text: &str, given: &[&str]) -> Result<Vec<String>, ConfFileError> {
        let entries = parse(&p(), text)?;
        let given = |id: &str| given.contains(&id);
        Ok(to_args(&p(), &run_cmd(), &entries, &given)?
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect())
    }

    #[test]
    fn lines_become_flags() {
        let got = args(
            "# a comment\n\nbridge = \"br1\"\npmd-threads=2\nport = veth1\nport = veth2,ofport=3\nverbose = true\n",
            &[],
        )
        .unwrap();
        assert_eq!(
            got,
            [
                "--bridge=br1",
                "--pmd-threads=2",
                "--port=veth1",
                "--port=veth2,ofport=3",
                "--verbose"
            ]
        );
        assert_eq!(
            args("verbose = false\n", &[]).unwrap(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn flags_on_the_command_line_win() {
        let got = args(
            "bridge = br1\nport = a\nport = b\npmd-threads = 3\n",
            &["ports", "bridge"],
        )
        .unwrap();
        assert_eq!(got, ["--pmd-threads=3"]);
    }

    #[test]
    fn errors_name_the_file_line_and_key() {
        let e = args("bridge = br1\n\npmd_threads = 2\n", &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/xbr/xbr.conf:3: unknown key 'pmd_threads' (did you mean 'pmd-threads'?)"
        );
        let e = args("frobnicate = 1\n", &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/xbr/xbr.conf:1: unknown key 'frobnicate'"
        );
        let e = args("config = /x\n", &[]).unwrap_err();
        assert!(
            matches!(e, ConfFileError::UnknownKey { line: 1, .. }),
            "{e}"
        );
        let e = args("# x\npmd-threads = 99\n", &[]).unwrap_err();
        let s = e.to_string();
        assert!(
            s.starts_with("/etc/xbr/xbr.conf:2: key 'pmd-threads': "),
            "{s}"
        );
        assert!(s.contains("99"), "{s}");
        // A bad value is an error even when the flag wins over it.
        assert!(args("pmd-threads = x\n", &["pmd_threads"]).is_err());
        let e = args("bridge = a\nbridge = b\n", &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/xbr/xbr.conf:2: key 'bridge' is already given on line 1"
        );
        let e = args("bridge\n", &[]).unwrap_err();
        assert_eq!(e.to_string(), "/etc/xbr/xbr.conf:1: expected 'key = value'");
        let e = args("pmd threads = 1\n", &[]).unwrap_err();
        assert!(matches!(e, ConfFileError::Syntax { line: 1, .. }));
        let e = args("verbose = yes\n", &[]).unwrap_err();
        assert!(
            e.to_string()
                .contains("key 'verbose': expected true or false"),
            "{e}"
        );
        let e = args("bridge =\n", &[]).unwrap_err();
        assert!(
            e.to_string().contains("key 'bridge': a value is required"),
            "{e}"
        );
    }

    #[test]
    fn merge_inserts_after_the_subcommand() {
        let dir = std::env::temp_dir().join(format!("xbrt-conffile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("xbr.conf");
        std::fs::write(&file, "bridge = br7\npmd-threads = 2\n").unwrap();
        let argv: Vec<OsString> = [
            "xbr",
            "run",
            "--config",
            file.to_str().unwrap(),
            "--pmd-threads",
            "4",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let m = top().get_matches_from(argv.clone());
        let merged = merge_argv(&top(), &m, &argv, "run").unwrap().unwrap();
        let m2 = top().get_matches_from(merged);
        let run = m2.subcommand_matches("run").unwrap();
        assert_eq!(run.get_one::<String>("bridge").unwrap(), "br7");
        assert_eq!(*run.get_one::<u32>("pmd_threads").unwrap(), 4);
        // No --config: nothing to merge.
        let plain: Vec<OsString> = ["xbr", "run"].iter().map(OsString::from).collect();
        let m = top().get_matches_from(plain.clone());
        assert!(merge_argv(&top(), &m, &plain, "run").unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
