//! `ovs-appctl vlog/list` and `vlog/set` over xbr's modules.
//!
//! OVS logs by module (`ofproto_dpif`, `conntrack`, ...) and destination
//! (console, syslog, file). xbr's log records carry a tracing target,
//! the Rust module path of the code that logged (`dataplane::vxlan::arp`);
//! a "module" here is one of xbr's code modules ([`MODULES`]), its level
//! the level of the directive for its target (EnvFilter's directives,
//! the most specific one that covers it). xbr writes one destination:
//! the file with `--log-file`, else the console (stderr); syslog is off.
//!
//! `vlog/set` takes OVS's spec, words joined by `:` (`conntrack:dbg`,
//! `ANY:file:info`, `dbg`): a module (or `ANY`), a destination (or
//! `ANY`) and a level, each optional; it edits the directives in force.

use super::LogError;

/// xbr's modules as `vlog/list` shows them: (name, tracing target).
pub const MODULES: &[(&str, &str)] = &[
    ("bpf", "dataplane::fastpath::loader"),
    ("bridge", "xbr_daemon::bridge"),
    ("conntrack", "dataplane::conntrack"),
    ("control", "dataplane::control"),
    ("ctl", "xbr_daemon::ctl"),
    ("engine", "dataplane::engine"),
    ("flowtable", "flowtable"),
    ("hostveth", "dataplane::hostveth"),
    ("kicker", "dataplane::kicker"),
    ("lab", "xbr_lab"),
    ("live", "dataplane::live"),
    ("meter", "dataplane::meter"),
    ("metrics", "xbr_daemon::metrics"),
    ("netdev", "dataplane::netdev"),
    ("ofproto", "ofproto"),
    ("ovsdb", "xbr_daemon::ovsdb"),
    ("ports", "dataplane::ports"),
    ("qos", "dataplane::qos"),
    ("tap", "dataplane::tap"),
    ("unixctl", "xbr_daemon::unixctl"),
    ("vlog", super::ratelimit::NOTICE_TARGET),
    ("vxlan", "dataplane::vxlan"),
    ("xbr", "xbr"),
    ("xdpcache", "dataplane::fastpath::cache"),
    ("xsk", "dataplane::xsk"),
];

/// One directive: `target=level`, or the default `level` (target None).
/// Directives with spans or fields are kept as they are (`raw`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Directive {
    target: Option<String>,
    level: String,
    raw: Option<String>,
}

fn parse(directives: &str) -> Vec<Directive> {
    directives
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| {
            if d.contains('[') || d.contains('{') {
                return Directive {
                    target: None,
                    level: String::new(),
                    raw: Some(d.to_string()),
                };
            }
            match d.split_once('=') {
                Some((t, l)) => Directive {
                    target: Some(t.to_string()),
                    level: l.to_ascii_lowercase(),
                    raw: None,
                },
                None if is_level(d) => Directive {
                    target: None,
                    level: d.to_ascii_lowercase(),
                    raw: None,
                },
                // A bare target turns everything on for it (EnvFilter).
                None => Directive {
                    target: Some(d.to_string()),
                    level: "trace".into(),
                    raw: None,
                },
            }
        })
        .collect()
}

fn render(list: &[Directive]) -> String {
    let words: Vec<String> = list
        .iter()
        .map(|d| match (&d.raw, &d.target) {
            (Some(r), _) => r.clone(),
            (None, Some(t)) => format!("{t}={}", d.level),
            (None, None) => d.level.clone(),
        })
        .collect();
    words.join(",")
}

fn is_level(w: &str) -> bool {
    matches!(
        w.to_ascii_lowercase().as_str(),
        "off" | "error" | "warn" | "info" | "debug" | "trace"
    )
}

/// Whether `target` is `module` or inside it.
fn covers(module: &str, target: &str) -> bool {
    target == module
        || target
            .strip_prefix(module)
            .is_some_and(|rest| rest.starts_with("::"))
}

/// The level `directives` give `target` (the most specific directive).
fn level_of(list: &[Directive], target: &str) -> String {
    let mut best: Option<(usize, &str)> = None;
    let mut default = "error";
    for d in list.iter().filter(|d| d.raw.is_none()) {
        match &d.target {
            None => default = &d.level,
            Some(t) if covers(t, target) => {
                if best.is_none_or(|(len, _)| t.len() >= len) {
                    best = Some((t.len(), &d.level));
                }
            }
            Some(_) => {}
        }
    }
    best.map_or(default, |(_, l)| l).to_string()
}

/// OVS's name for a tracing level.
fn ovs_level(level: &str) -> &'static str {
    match level {
        "off" => "OFF",
        "error" => "ERR",
        "warn" => "WARN",
        "info" => "INFO",
        _ => "DBG",
    }
}

/// `vlog/list`: each module's level per destination, as OVS lays it
/// out, with the tracing target each module is.
pub fn list_text(directives: &str, to_file: bool) -> String {
    let list = parse(directives);
    let mut out = format!(
        "{:<17}{:<11}{:<10}{:<11}{}\n{:<17}{:<11}{:<10}{:<11}{}\n",
        "", "console", "syslog", "file", "target", "", "-------", "------", "------", "------"
    );
    for (name, target) in MODULES {
        let level = ovs_level(&level_of(&list, target));
        let (console, file) = if to_file {
            ("OFF", level)
        } else {
            (level, "OFF")
        };
        out.push_str(&format!(
            "{name:<17}{console:<11}{:<10}{file:<11}{target}\n",
            "OFF"
        ));
    }
    out
}

/// The tracing level of an OVS level word.
fn tracing_level(word: &str) -> Option<&'static str> {
    match word.to_ascii_lowercase().as_str() {
        "off" => Some("off"),
        "emer" | "err" => Some("error"),
        "warn" => Some("warn"),
        "info" => Some("info"),
        "dbg" | "debug" => Some("debug"),
        _ => None,
    }
}

/// `vlog/set SPEC`: the directives `directives` become.
pub fn set(directives: &str, spec: &str) -> Result<String, LogError> {
    let (mut module, mut level) = (None, None);
    for word in spec.split(':').map(str::trim).filter(|w| !w.is_empty()) {
        if let Some(l) = tracing_level(word) {
            level = Some(l);
        } else if matches!(
            word.to_ascii_lowercase().as_str(),
            "console" | "syslog" | "file"
        ) {
            // xbr writes one destination; the level applies to it.
        } else if word.eq_ignore_ascii_case("any") {
            module.get_or_insert(None);
        } else if let Some((_, target)) = MODULES.iter().find(|(n, _)| *n == word) {
            module = Some(Some(*target));
        } else {
            return Err(LogError::Vlog(format!(
                "no destination, level, or module \"{word}\""
            )));
        }
    }
    let level = level.unwrap_or("debug");
    let mut list = parse(directives);
    match module.flatten() {
        Some(target) => {
            list.retain(|d| d.target.as_deref() != Some(target));
            list.push(Directive {
                target: Some(target.to_string()),
                level: level.to_string(),
                raw: None,
            });
        }
        None => {
            // Every module: one default level, no per-module ones.
            list.retain(|d| d.raw.is_some());
            list.insert(
                0,
                Directive {
                    target: None,
                    level: level.to_string(),
                    raw: None,
                },
            );
        }
    }
    Ok(render(&list))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_level_is_the_most_specific_directive_covering_it() {
        let l = parse("warn,dataplane=info,dataplane::vxlan=debug");
        assert_eq!(level_of(&l, "dataplane::vxlan"), "debug");
        assert_eq!(level_of(&l, "dataplane::conntrack"), "info");
        assert_eq!(level_of(&l, "ofproto"), "warn");
        // `dataplane::vx` does not cover `dataplane::vxlan`.
        let l = parse("info,dataplane::vx=off");
        assert_eq!(level_of(&l, "dataplane::vxlan"), "info");
    }

    #[test]
    fn vlog_set_edits_one_module_or_all_and_refuses_unknown_words() {
        assert_eq!(
            set("info", "conntrack:dbg").unwrap(),
            "info,dataplane::conntrack=debug"
        );
        assert_eq!(
            set("info,dataplane::conntrack=debug", "conntrack:file:warn").unwrap(),
            "info,dataplane::conntrack=warn"
        );
        assert_eq!(set("info,ofproto=debug", "ANY:any:err").unwrap(), "error");
        assert_eq!(set("info", "off").unwrap(), "off");
        let e = set("info", "nosuch:dbg").unwrap_err().to_string();
        assert_eq!(e, "no destination, level, or module \"nosuch\"");
    }

    #[test]
    fn vlog_list_shows_each_module_with_its_target_in_ovs_columns() {
        let t = list_text("info,dataplane::vxlan=debug", true);
        let mut lines = t.lines();
        assert!(lines.next().unwrap().contains("console    syslog    file"));
        assert!(lines
            .next()
            .unwrap()
            .contains("-------    ------    ------"));
        assert!(
            t.contains("\nvxlan            OFF        OFF       DBG        dataplane::vxlan\n"),
            "{t}"
        );
        assert!(
            t.contains("\nconntrack        OFF        OFF       INFO       dataplane::conntrack\n")
        );
        let t = list_text("warn", false);
        assert!(
            t.contains("\nofproto          WARN       OFF       OFF        ofproto\n"),
            "{t}"
        );
    }
}
