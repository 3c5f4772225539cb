use super::*;

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn args(list: &[&str]) -> Vec<String> {
    names(list)
}

#[test]
fn trace_names_a_bridge_or_takes_the_only_one() {
    let one = names(&["br0"]);
    let two = names(&["br0", "br1"]);
    let flow = "in_port=1,tcp";
    let ask = |b: &str, line: &str| Ok(Plan::Ask(vec![(b.to_string(), line.to_string())]));
    assert_eq!(
        plan("ofproto/trace", &args(&[flow]), &one),
        ask("br0", "trace in_port=1,tcp")
    );
    assert_eq!(
        plan(
            "ofproto/trace",
            &args(&["br1", flow, "--ct-next", "trk|est", "--ct-next=trk,new"]),
            &two
        ),
        ask(
            "br1",
            "trace --ct-next=trk,est --ct-next=trk,new in_port=1,tcp"
        )
    );
    for (params, why) in [
        (&[flow][..], "several bridges run"),
        (&["br9", flow], "br9: no such bridge"),
        (&["br0", flow, "--ct-next"], "Missing argument"),
        (&["br0", flow, "-generate"], "-generate: unknown option"),
        (&[], "expects [bridge] flow"),
    ] {
        let e = plan("ofproto/trace", &args(params), &two).unwrap_err();
        assert!(e.contains(why), "{params:?}: {e}");
    }
}

#[test]
fn datapath_commands_ask_every_bridge_or_the_one_named() {
    let two = names(&["br0", "br1"]);
    let each = |line: &str| {
        Ok(Plan::Ask(vec![
            ("br0".to_string(), line.to_string()),
            ("br1".to_string(), line.to_string()),
        ]))
    };
    assert_eq!(
        plan("dpctl/dump-flows", &[], &two),
        each("dpctl dump-flows")
    );
    assert_eq!(plan("dpctl/del-flows", &[], &two), each("dpctl del-flows"));
    assert_eq!(
        plan("dpctl/show", &args(&["-s", "netdev@ovs-netdev"]), &two),
        Ok(Plan::DpctlShow(two.clone(), true))
    );
    assert_eq!(
        plan("dpctl/show", &args(&["br1"]), &two),
        Ok(Plan::DpctlShow(vec!["br1".into()], false))
    );
    assert_eq!(
        plan("dpctl/dump-flows", &args(&["netdev@br1"]), &two),
        Ok(Plan::Ask(vec![("br1".into(), "dpctl dump-flows".into())]))
    );
    assert_eq!(
        plan("dpctl/dump-conntrack", &args(&["zone=5"]), &two),
        each("conntrack dump --zone 5")
    );
    assert_eq!(
        plan("dpctl/flush-conntrack", &args(&["br0"]), &two),
        Ok(Plan::Ask(vec![("br0".into(), "conntrack flush".into())]))
    );
    assert!(plan("dpctl/dump-conntrack", &args(&["zone=x"]), &two).is_err());
}

#[test]
fn vlog_set_needs_a_spec() {
    assert!(plan("vlog/set", &[], &names(&["br0"])).is_err());
}

#[test]
fn unknown_commands_are_refused_as_ovs_refuses_them() {
    let e = plan("nosuch/command", &[], &names(&["br0"])).unwrap_err();
    assert_eq!(
        e,
        "\"nosuch/command\" is not a valid command (use \"list-commands\" to see a list of valid commands)"
    );
    let Ok(Plan::Text(list)) = plan("list-commands", &[], &[]) else {
        panic!("list-commands answers itself");
    };
    assert!(list.contains("  ofproto/trace"), "{list}");
    assert_eq!(
        plan("exit", &args(&["--cleanup"]), &[]),
        Ok(Plan::Exit { cleanup: true })
    );
    assert_eq!(plan("exit", &[], &[]), Ok(Plan::Exit { cleanup: false }));
    assert!(plan("exit", &args(&["--bogus"]), &[]).is_err());
}

#[test]
fn requests_that_are_not_json_rpc_get_an_error_with_their_id() {
    let dir = std::env::temp_dir();
    let reply = answer(
        &dir,
        &serde_json::json!({"id": 7, "method": "version", "params": [1]}),
    );
    assert_eq!(reply["id"], 7);
    assert!(reply["result"].is_null());
    assert!(reply["error"].as_str().unwrap().contains("string params"));
    let reply = answer(&dir, &serde_json::json!({"id": "x", "method": "version"}));
    assert_eq!(reply["error"], serde_json::Value::Null);
    assert!(reply["result"]
        .as_str()
        .unwrap()
        .starts_with("ovs-vswitchd (xbr) "));
}

#[test]
fn conntrack_limits_and_summaries_map_to_conntrack_requests() {
    let one = names(&["br0"]);
    let two = names(&["br0", "br1"]);
    let ask = |b: &str, line: &str| Plan::Ask(vec![(b.to_string(), line.to_string())]);
    assert_eq!(
        plan("dpctl/ct-get-maxconns", &[], &one),
        Ok(ask("br0", "conntrack limit"))
    );
    assert_eq!(
        plan("dpctl/ct-get-nconns", &args(&["netdev@br1"]), &two),
        Ok(ask("br1", "conntrack count"))
    );
    let set = |line: &str| {
        Ok(Plan::AskThen(
            vec![
                ("br0".to_string(), line.to_string()),
                ("br1".to_string(), line.to_string()),
            ],
            "setting maxconns successful\n".to_string(),
        ))
    };
    assert_eq!(
        plan("dpctl/ct-set-maxconns", &args(&["5000"]), &two),
        set("conntrack limit 5000")
    );
    assert_eq!(
        plan("dpctl/ct-set-maxconns", &args(&["br1", "7"]), &two),
        Ok(Plan::AskThen(
            vec![("br1".to_string(), "conntrack limit 7".to_string())],
            "setting maxconns successful\n".to_string()
        ))
    );
    for bad in [
        &[][..],
        &["many"],
        &["-1"],
        &["4294967296"],
        &["br0", "1", "2"],
    ] {
        assert_eq!(
            plan("dpctl/ct-set-maxconns", &args(bad), &one),
            Err("maxconns missing or malformed".to_string()),
            "{bad:?}"
        );
    }
    assert_eq!(
        plan("dpctl/ct-stats-show", &args(&["zone=3", "verbose"]), &one),
        Ok(ask("br0", "conntrack summary --zone 3 --verbose"))
    );
    assert_eq!(
        plan("dpctl/ct-stats-show", &args(&["-m"]), &one),
        Ok(ask("br0", "conntrack summary --verbose"))
    );
    assert!(plan("dpctl/ct-stats-show", &args(&["zone=x"]), &one).is_err());
}

#[test]
fn fdb_commands_ask_the_bridges_named_or_all() {
    let two = names(&["br0", "br1"]);
    let ask = |targets: &[&str], line: &str| {
        targets
            .iter()
            .map(|b| (b.to_string(), line.to_string()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        plan("fdb/show", &args(&["br1"]), &two),
        Ok(Plan::Ask(ask(&["br1"], "fdb show")))
    );
    assert_eq!(
        plan("fdb/show", &[], &two),
        Ok(Plan::Ask(ask(&["br0", "br1"], "fdb show")))
    );
    assert_eq!(
        plan("fdb/flush", &[], &two),
        Ok(Plan::AskThen(
            ask(&["br0", "br1"], "fdb flush"),
            "table successfully flushed\n".into()
        ))
    );
    assert!(plan("fdb/show", &args(&["br9"]), &two)
        .unwrap_err()
        .contains("br9: no such bridge"));
    assert!(plan("fdb/flush", &args(&["br0", "br1"]), &two).is_err());
}

#[test]
fn pmd_rxq_show_asks_every_bridge_or_the_one_named() {
    let two = names(&["br0", "br1"]);
    assert_eq!(
        plan("dpif-netdev/pmd-rxq-show", &[], &two),
        Ok(Plan::Ask(vec![
            ("br0".into(), "pmd rxq".into()),
            ("br1".into(), "pmd rxq".into())
        ]))
    );
    assert_eq!(
        plan(
            "dpif-netdev/pmd-rxq-show",
            &names(&["-secs", "5", "netdev@br1"]),
            &two
        ),
        Ok(Plan::Ask(vec![("br1".into(), "pmd rxq".into())]))
    );
    assert_eq!(
        plan("dpif-netdev/pmd-rxq-show", &names(&["-pmd", "1"]), &two),
        Ok(Plan::Ask(vec![
            ("br0".into(), "pmd rxq --core 1".into()),
            ("br1".into(), "pmd rxq --core 1".into())
        ]))
    );
    assert!(plan("dpif-netdev/pmd-rxq-show", &names(&["-pmd", "one"]), &two).is_err());
    assert!(plan("dpif-netdev/pmd-rxq-show", &names(&["-secs"]), &two).is_err());
}

#[test]
fn dpif_show_gathers_every_bridge() {
    assert_eq!(
        plan("dpif/show", &[], &names(&["br0", "br1"])),
        Ok(Plan::DpifShow(names(&["br0", "br1"])))
    );
    assert!(plan("dpif/show", &[], &[]).is_err());
}

#[test]
fn pmd_stats_show_and_clear_take_a_core_and_a_bridge() {
    let two = names(&["br0", "br1"]);
    assert_eq!(
        plan("dpif-netdev/pmd-stats-show", &[], &two),
        Ok(Plan::Ask(vec![
            ("br0".into(), "pmd stats".into()),
            ("br1".into(), "pmd stats".into())
        ]))
    );
    assert_eq!(
        plan(
            "dpif-netdev/pmd-stats-clear",
            &names(&["-pmd", "3", "br1"]),
            &two
        ),
        Ok(Plan::Ask(vec![(
            "br1".into(),
            "pmd stats-clear --core 3".into()
        )]))
    );
    assert!(plan("dpif-netdev/pmd-stats-show", &names(&["-pmd"]), &two).is_err());
    assert!(plan("dpif-netdev/pmd-stats-show", &names(&["-pmd", "x"]), &two).is_err());
    assert!(plan("dpif-netdev/pmd-stats-show", &names(&["-secs", "1"]), &two).is_err());
}

#[test]
fn sosreports_commands_are_planned_or_refused_as_ovs_refuses_them() {
    let two = names(&["br0", "br1"]);
    assert_eq!(
        plan("dpctl/dump-dps", &[], &two),
        Ok(Plan::Text("netdev@ovs-netdev\n".into()))
    );
    assert_eq!(
        plan("dpctl/dump-dps", &[], &[]),
        Ok(Plan::Text(String::new()))
    );
    // `netdev@ovs-netdev` stands for every bridge.
    assert_eq!(
        plan("dpctl/ipf-get-status", &args(&["netdev@ovs-netdev"]), &two),
        Ok(Plan::Ask(vec![
            ("br0".into(), "support ipf".into()),
            ("br1".into(), "support ipf".into())
        ]))
    );
    assert_eq!(
        plan(
            "bridge/dump-flows",
            &args(&["--offload-stats", "br1"]),
            &two
        ),
        Ok(Plan::Ask(vec![("br1".into(), "support dump-flows".into())]))
    );
    assert_eq!(
        plan("bridge/dump-flows", &args(&["br9"]), &two),
        Err("no such bridge".into())
    );
    assert_eq!(
        plan(
            "dpif-netdev/pmd-perf-show",
            &args(&["-nh", "-it", "10", "-pmd", "3"]),
            &two
        ),
        Ok(Plan::Ask(vec![
            ("br0".into(), "support pmd-perf --core 3".into()),
            ("br1".into(), "support pmd-perf --core 3".into())
        ]))
    );
    assert_eq!(
        plan("qos/show", &args(&["p1"]), &two),
        Ok(Plan::AnyOf(
            vec![
                ("br0".into(), "support qos p1".into()),
                ("br1".into(), "support qos p1".into())
            ],
            "no such interface".into()
        ))
    );
    assert_eq!(plan("bond/show", &[], &two), Ok(Plan::Text(String::new())));
    assert_eq!(
        plan("bond/show", &args(&["p1"]), &two),
        Err("no such bond".into())
    );
    assert_eq!(
        plan("cfm/show", &args(&["p1"]), &two),
        Err("no such interface".into())
    );
    let Ok(Plan::Text(list)) = plan("list-commands", &[], &[]) else {
        panic!("list-commands answers itself");
    };
    for c in [
        "coverage/show",
        "memory/show",
        "dpctl/dump-dps",
        "upcall/show",
        "vlog/reopen",
    ] {
        assert!(list.contains(&format!("  {c}")), "{c}: {list}");
    }
}

#[test]
fn zone_limit_commands_take_ovs_arguments_and_an_optional_datapath() {
    let two = names(&["br0", "br1"]);
    let both = |line: &str| {
        vec![
            ("br0".to_string(), line.to_string()),
            ("br1".to_string(), line.to_string()),
        ]
    };
    let each = |line: &str| Ok(Plan::Ask(both(line)));
    let quietly = |line: &str| Ok(Plan::AskThen(both(line), String::new()));
    assert_eq!(
        plan(
            "dpctl/ct-set-limits",
            &args(&["default=5", "zone=3,limit=1"]),
            &two
        ),
        quietly("conntrack set-limits default=5 zone=3,limit=1")
    );
    // A first argument naming a datapath or bridge is one; anything else
    // is a zone argument, as OVS's dp_arg_exists decides.
    assert_eq!(
        plan("dpctl/ct-get-limits", &args(&["br1", "zone=3,4"]), &two),
        Ok(Plan::Ask(vec![(
            "br1".to_string(),
            "conntrack get-limits zone=3,4".to_string()
        )]))
    );
    assert_eq!(
        plan("dpctl/ct-get-limits", &args(&["netdev@ovs-netdev"]), &two),
        each("conntrack get-limits")
    );
    assert_eq!(
        plan("dpctl/ct-del-limits", &args(&["zone=3"]), &two),
        quietly("conntrack del-limits zone=3")
    );
    for (method, bad, message) in [
        (
            "dpctl/ct-set-limits",
            &["zone=3"][..],
            "failed to parse zone limit",
        ),
        ("dpctl/ct-set-limits", &[], "no limit given"),
        ("dpctl/ct-del-limits", &["3"], "invalid argument 3"),
        ("dpctl/ct-del-limits", &[], "requires at least 1"),
        (
            "dpctl/ct-get-limits",
            &["zone=1", "zone=2"],
            "takes at most",
        ),
    ] {
        let got = plan(method, &args(bad), &two);
        assert!(
            got.as_ref().is_err_and(|e| e.contains(message)),
            "{method} {bad:?}: {got:?}"
        );
    }
}
