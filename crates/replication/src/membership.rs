//! Membership changes of one Raft group, sans IO: the next step a
//! leader takes from the members it has toward the ones assigned
//! ([`next_step`]), so the group never stops having a current majority
//! of voters. `jsdriver`'s stream leaders (`jscluster::leaders`) carry
//! the steps out.

use crate::engine::ConfChangeType;

/// A group's membership as its leader sees it, and what the meta group
/// assigned it.
pub struct Members<'a> {
    pub me: u64,
    pub voters: &'a [u64],
    pub learners: &'a [u64],
    pub assigned: &'a [u64],
}

/// What a leader does next about its group's membership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Propose this conf change.
    Change(ConfChangeType, u64),
    /// This leader is to go: hand leadership to this member first.
    Transfer(u64),
    /// Removing this member now would leave the group without a current
    /// majority: wait until the others catch up.
    Wait(u64),
    /// The members are what was assigned.
    Settled,
}

/// Whether `set` has a majority of members `current`.
fn has_current_majority(set: &[u64], current: &dyn Fn(u64) -> bool) -> bool {
    !set.is_empty() && set.iter().filter(|&&v| current(v)).count() > set.len() / 2
}

/// The next membership change toward the assigned peers, so that the
/// group never stops having a current majority of voters (it could not
/// elect, nor commit, until a member caught up; issue 43), nor loses a
/// healthy voter before its replacement votes:
/// 1. a learner no longer assigned goes (it counts toward nothing);
/// 2. a voter that goes and is `dead` goes first, if the rest are a
///    current majority without it (the group tolerates no fewer
///    failures for it);
/// 3. a new peer joins as a learner, which the quorum does not count...
/// 4. ...and becomes a voter once it is current;
/// 5. a voter that goes, once no learner is still catching up and the
///    rest are a current majority without it (this leader hands its
///    leadership to a current member first).
pub fn next_step(
    m: &Members<'_>,
    current: &dyn Fn(u64) -> bool,
    dead: &dyn Fn(u64) -> bool,
) -> Step {
    let assigned = |v: &u64| m.assigned.contains(v);
    let without = |id: u64| -> Vec<u64> { m.voters.iter().copied().filter(|&v| v != id).collect() };
    if let Some(&id) = m.learners.iter().find(|l| !assigned(l)) {
        return Step::Change(ConfChangeType::RemoveNode, id);
    }
    let going: Vec<u64> = m.voters.iter().copied().filter(|v| !assigned(v)).collect();
    let dead = going
        .iter()
        .copied()
        .find(|&id| id != m.me && dead(id) && has_current_majority(&without(id), current));
    if let Some(id) = dead {
        return Step::Change(ConfChangeType::RemoveNode, id);
    }
    let joining = m
        .assigned
        .iter()
        .copied()
        .find(|p| !m.voters.contains(p) && !m.learners.contains(p));
    if let Some(id) = joining {
        return Step::Change(ConfChangeType::AddLearnerNode, id);
    }
    if let Some(&id) = m.learners.iter().find(|&&l| current(l)) {
        return Step::Change(ConfChangeType::AddNode, id);
    }
    let Some(&id) = going.first() else {
        return Step::Settled;
    };
    if !m.learners.is_empty() {
        // Its replacement does not vote yet.
        return Step::Wait(id);
    }
    if id == m.me {
        // To a member that stays and is current; none: wait for one.
        return match m
            .voters
            .iter()
            .copied()
            .find(|&v| v != m.me && assigned(&v) && current(v))
        {
            Some(to) => Step::Transfer(to),
            None => Step::Wait(id),
        };
    }
    match has_current_majority(&without(id), current) {
        true => Step::Change(ConfChangeType::RemoveNode, id),
        false => Step::Wait(id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: u64 = 1;

    /// The step for voters, learners and assigned peers, with `current`
    /// the members that are current.
    fn step(voters: &[u64], learners: &[u64], assigned: &[u64], current: &[u64]) -> Step {
        let m = Members {
            me: ME,
            voters,
            learners,
            assigned,
        };
        // Not current: down, as far as these cases go.
        let current = |v| v == ME || current.contains(&v);
        next_step(&m, &current, &|v| !current(v))
    }

    use ConfChangeType::{AddLearnerNode as Learner, AddNode as Promote, RemoveNode as Remove};

    /// What a case is, its voters, learners, assigned and current
    /// members, and the step it takes.
    type Case = (
        &'static str,
        &'static [u64],
        &'static [u64],
        &'static [u64],
        &'static [u64],
        Step,
    );

    /// Each membership change toward the assignment, and when it waits.
    #[test]
    fn membership_changes_keep_a_current_majority() {
        let cases: &[Case] = &[
            (
                "settled",
                &[1, 2, 3],
                &[],
                &[1, 2, 3],
                &[2, 3],
                Step::Settled,
            ),
            // Server 3 is down and replaced by 4: it goes first, so the
            // quorum never counts two members that cannot answer.
            (
                "dead first",
                &[1, 2, 3],
                &[],
                &[1, 2, 4],
                &[2],
                Step::Change(Remove, 3),
            ),
            (
                "then a learner",
                &[1, 2],
                &[],
                &[1, 2, 4],
                &[2],
                Step::Change(Learner, 4),
            ),
            (
                "learner behind",
                &[1, 2],
                &[4],
                &[1, 2, 4],
                &[2],
                Step::Settled,
            ),
            (
                "learner current",
                &[1, 2],
                &[4],
                &[1, 2, 4],
                &[2, 4],
                Step::Change(Promote, 4),
            ),
            // Server 3 is down and the healthy 2 is replaced by 4: 2 stays
            // until 4 is a current voter, or 1 would be alone.
            (
                "healthy goes",
                &[1, 2, 3],
                &[],
                &[1, 3, 4],
                &[2],
                Step::Change(Learner, 4),
            ),
            (
                "healthy waits",
                &[1, 2, 3],
                &[4],
                &[1, 3, 4],
                &[2],
                Step::Wait(2),
            ),
            // All healthy: 3 stays until its replacement votes, though the
            // other two are a current majority without it.
            (
                "no early removal",
                &[1, 2, 3],
                &[4],
                &[1, 2, 4],
                &[2, 3],
                Step::Wait(3),
            ),
            (
                "replacement votes",
                &[1, 2, 3],
                &[4],
                &[1, 2, 4],
                &[2, 3, 4],
                Step::Change(Promote, 4),
            ),
            (
                "promoted",
                &[1, 2, 3],
                &[4],
                &[1, 3, 4],
                &[2, 4],
                Step::Change(Promote, 4),
            ),
            (
                "healthy leaves",
                &[1, 2, 3, 4],
                &[],
                &[1, 3, 4],
                &[2, 4],
                Step::Change(Remove, 2),
            ),
            // The leader goes: to a current member that stays.
            (
                "leader hands over",
                &[1, 2, 3],
                &[],
                &[2, 3, 4],
                &[2, 3],
                Step::Change(Learner, 4),
            ),
            (
                "leader transfers",
                &[1, 2, 3, 4],
                &[],
                &[2, 3, 4],
                &[3, 4],
                Step::Transfer(3),
            ),
            ("leader waits", &[1, 2], &[], &[2], &[], Step::Wait(1)),
            // Scaling down one at a time, each leaving a current majority.
            (
                "scale down",
                &[1, 2, 3],
                &[],
                &[1],
                &[2, 3],
                Step::Change(Remove, 2),
            ),
            (
                "stale goes first",
                &[1, 2, 3],
                &[],
                &[1, 3],
                &[3],
                Step::Change(Remove, 2),
            ),
            (
                "no majority left",
                &[1, 2, 3],
                &[],
                &[1],
                &[],
                Step::Wait(2),
            ),
            (
                "unassigned learner",
                &[1, 2, 3],
                &[5],
                &[1, 2, 3],
                &[2, 3],
                Step::Change(Remove, 5),
            ),
        ];
        for (what, voters, learners, assigned, current, want) in cases {
            assert_eq!(step(voters, learners, assigned, current), *want, "{what}");
        }
    }
}
