//! The bound on groups (`flowtable::group::MAX_GROUPS`): an ADD past it
//! is refused with OFPGMFC_OUT_OF_GROUPS and changes nothing; modifying an
//! existing group still works; deleting one makes room again.

use flowtable::group::MAX_GROUPS;
use flowtable::text::parse_group;
use flowtable::*;

fn add(t: &mut FlowTables, id: usize) -> Result<Vec<Change>, (usize, ModError)> {
    let g = parse_group(&format!("group_id={id},type=all,bucket=actions=output:1")).unwrap();
    t.apply_batch(&[PipelineMod::Group(g)])
}

#[test]
fn groups_past_the_bound_are_refused_with_out_of_groups() {
    let mut t = FlowTables::new();
    // One batch for the first MAX_GROUPS (fast), then one at a time.
    let all: Vec<PipelineMod> = (1..=MAX_GROUPS)
        .map(|id| {
            PipelineMod::Group(
                parse_group(&format!("group_id={id},type=all,bucket=actions=output:1")).unwrap(),
            )
        })
        .collect();
    t.apply_batch(&all).unwrap();
    let (_, err) = add(&mut t, MAX_GROUPS + 1).unwrap_err();
    let ModError::Group(e) = &err else {
        panic!("not a group error: {err:?}");
    };
    assert_eq!(
        e.ofp_error(),
        (6, 2),
        "OFPET_GROUP_MOD_FAILED/OUT_OF_GROUPS"
    );
    assert!(e.to_string().contains("maximum of 65536 groups"), "{e}");
    // Replacing an existing group is not an addition.
    let m = parse_group("group_id=5,type=all,bucket=actions=output:2").unwrap();
    let m = GroupMod {
        command: GroupModCommand::Modify,
        ..m
    };
    t.apply_batch(&[PipelineMod::Group(m)]).unwrap();
    // A deletion makes room for one more.
    let mut d = parse_group("group_id=7,type=all").unwrap();
    d.command = GroupModCommand::Delete;
    t.apply_batch(&[PipelineMod::Group(d)]).unwrap();
    add(&mut t, MAX_GROUPS + 1).unwrap();
    assert!(add(&mut t, MAX_GROUPS + 2).is_err());
}
