//! Flow sets the criterion benches share.

use flowtable::matching::ETH_TYPE_IPV4;
use flowtable::{Action, Field, FlowMod, Instructions, Match, SubField};

/// The output action to port `port`.
pub fn out(port: u32) -> Action {
    Action::Output { port, max_len: 0 }
}

/// Three tables like the agent's: classify the port, look the destination
/// up among `n` exact IPv4 flows that load a register, output on it.
pub fn three_table_flows(n: u32) -> Vec<FlowMod> {
    let mut mods = Vec::new();
    let mut m = Match::catch_all();
    m.set_exact(Field::InPort, 1);
    let to1 = Instructions {
        goto_table: Some(1),
        ..Instructions::default()
    };
    mods.push(FlowMod::add(0, 100, m, to1));
    for i in 0..n {
        let mut m = Match::catch_all();
        m.set_exact(Field::EthType, u64::from(ETH_TYPE_IPV4));
        m.set_exact(Field::IpDst, u64::from(0x0a00_0000 | i));
        let mut ins = Instructions::apply(vec![Action::RegLoad {
            dst: SubField {
                field: Field::Reg(1),
                ofs: 0,
                nbits: 32,
                named: None,
            },
            value: 2,
        }]);
        ins.goto_table = Some(2);
        mods.push(FlowMod::add(1, 100, m, ins));
    }
    let mut m = Match::catch_all();
    m.set_exact(Field::Reg(1), 2);
    mods.push(FlowMod::add(2, 100, m, Instructions::apply(vec![out(2)])));
    mods
}
