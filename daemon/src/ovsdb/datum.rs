//! OVSDB's JSON data (RFC 7047 §5.1) and the client's replica of the
//! monitored tables.
//!
//! # Design
//!
//! [`Replica`] stores each monitored row as the JSON object the server
//! sent (`new` of a `monitor` update carries every monitored column), keyed
//! by table and row UUID; reading a column interprets OVSDB's encodings on
//! the spot (a one-element set may be sent as the bare atom, an optional
//! value as an empty set). It is rebuilt from the `monitor` reply after
//! every reconnection, so it never outlives the server's state. Tables
//! are small (one row per port), so nothing is indexed.

use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};

pub type Row = Map<String, Value>;

#[derive(Default, Debug)]
pub struct Replica {
    tables: HashMap<String, HashMap<String, Row>>,
}

impl Replica {
    /// Applies a `<table-updates>` object (the monitor reply, or the
    /// params of an `update` notification).
    pub fn apply(&mut self, updates: &Value) {
        let Some(tables) = updates.as_object() else {
            return;
        };
        for (table, rows) in tables {
            let Some(rows) = rows.as_object() else {
                continue;
            };
            let t = self.tables.entry(table.clone()).or_default();
            for (uuid, update) in rows {
                match update.get("new").and_then(Value::as_object) {
                    Some(new) => {
                        t.insert(uuid.clone(), new.clone());
                    }
                    None => {
                        t.remove(uuid);
                    }
                }
            }
        }
    }

    pub fn row(&self, table: &str, uuid: &str) -> Option<&Row> {
        self.tables.get(table)?.get(uuid)
    }

    /// Every row of `table`, with its UUID.
    pub fn rows<'a>(&'a self, table: &str) -> impl Iterator<Item = (&'a str, &'a Row)> + 'a {
        self.tables
            .get(table)
            .into_iter()
            .flat_map(|t| t.iter().map(|(u, r)| (u.as_str(), r)))
    }
}

/// The elements of a set column (a bare atom is a one-element set).
pub fn set_items(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(a) if a.len() == 2 && a[0] == "set" => a[1]
            .as_array()
            .map(|x| x.iter().collect())
            .unwrap_or_default(),
        Value::Null => Vec::new(),
        other => vec![other],
    }
}

/// The UUID of a `["uuid", "..."]` atom.
pub fn uuid_atom(v: &Value) -> Option<&str> {
    match v {
        Value::Array(a) if a.len() == 2 && a[0] == "uuid" => a[1].as_str(),
        _ => None,
    }
}

/// A column of UUIDs (references), as strings.
pub fn uuids(row: &Row, col: &str) -> Vec<String> {
    row.get(col)
        .map(|v| {
            set_items(v)
                .into_iter()
                .filter_map(uuid_atom)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// An optional or required string column (`None`: empty set or absent).
pub fn string(row: &Row, col: &str) -> Option<String> {
    let v = row.get(col)?;
    set_items(v)
        .first()
        .and_then(|a| a.as_str())
        .map(String::from)
}

/// An optional or required integer column.
pub fn integer(row: &Row, col: &str) -> Option<i64> {
    let v = row.get(col)?;
    set_items(v).first().and_then(|a| a.as_i64())
}

/// A string-to-string map column.
pub fn string_map(row: &Row, col: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(Value::Array(a)) = row.get(col) {
        if a.len() == 2 && a[0] == "map" {
            for pair in a[1].as_array().into_iter().flatten() {
                if let Some([k, v]) = pair.as_array().map(Vec::as_slice) {
                    if let (Some(k), Some(v)) = (k.as_str(), v.as_str()) {
                        out.insert(k.to_string(), v.to_string());
                    }
                }
            }
        }
    }
    out
}

/// An integer-to-UUID map column (`Bridge:flow_tables`), as (key,
/// referenced row's UUID) pairs.
pub fn int_uuid_map(row: &Row, col: &str) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    if let Some(Value::Array(a)) = row.get(col) {
        if a.len() == 2 && a[0] == "map" {
            for pair in a[1].as_array().into_iter().flatten() {
                if let Some([k, v]) = pair.as_array().map(Vec::as_slice) {
                    if let (Some(k), Some(v)) = (k.as_i64(), uuid_atom(v)) {
                        out.push((k, v.to_string()));
                    }
                }
            }
        }
    }
    out
}

/// A set of strings as OVSDB JSON.
pub fn str_set<S: AsRef<str>>(items: &[S]) -> Value {
    json!(["set", items.iter().map(|s| s.as_ref()).collect::<Vec<_>>()])
}

/// A string-to-integer map as OVSDB JSON.
pub fn int_map(items: &[(&str, u64)]) -> Value {
    json!([
        "map",
        items.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>()
    ])
}

/// A string-to-string map as OVSDB JSON.
pub fn str_map(items: &BTreeMap<String, String>) -> Value {
    json!([
        "map",
        items.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>()
    ])
}

/// The condition "this row", for `update` operations.
pub fn where_uuid(uuid: &str) -> Value {
    json!([["_uuid", "==", ["uuid", uuid]]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_follows_inserts_modifies_and_deletes() {
        let mut r = Replica::default();
        r.apply(
            &json!({"Interface": {"u1": {"new": {"name": "a", "ofport_request": ["set", []]}}}}),
        );
        assert_eq!(
            string(r.row("Interface", "u1").unwrap(), "name").as_deref(),
            Some("a")
        );
        assert_eq!(
            integer(r.row("Interface", "u1").unwrap(), "ofport_request"),
            None
        );
        r.apply(
            &json!({"Interface": {"u1": {"old": {}, "new": {"name": "a", "ofport_request": 1}}}}),
        );
        assert_eq!(
            integer(r.row("Interface", "u1").unwrap(), "ofport_request"),
            Some(1)
        );
        r.apply(&json!({"Interface": {"u1": {"old": {"name": "a"}}}}));
        assert!(r.row("Interface", "u1").is_none());
    }

    #[test]
    fn columns() {
        let row: Row = serde_json::from_value(json!({
            "ports": ["set", [["uuid", "p1"], ["uuid", "p2"]]],
            "one": ["uuid", "p3"],
            "options": ["map", [["key", "flow"], ["dst_port", "4789"]]],
            "fail_mode": ["set", []],
        }))
        .unwrap();
        assert_eq!(uuids(&row, "ports"), ["p1", "p2"]);
        assert_eq!(uuids(&row, "one"), ["p3"]);
        assert_eq!(string_map(&row, "options")["dst_port"], "4789");
        assert_eq!(string(&row, "fail_mode"), None);
    }
}
