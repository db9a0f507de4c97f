//! What `init` checks in the group: the settings GitLab's documentation asks of an Auto
//! Scaling group that a runner scales, each with the command that fixes it.
//!
//! GitLab's docker-autoscaler executor documentation ("Example: AWS autoscaling for 1 job per
//! instance"): "The runner directly manages all scaling behavior. For the scaling policy, use
//! `none` and enable instance scale-in protection. If you configured multiple availability
//! zones, disable the `AZRebalance` process."

use std::fmt;

/// The facts about a group the checks read (from `DescribeAutoScalingGroups` and
/// `DescribePolicies`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupFacts {
    /// The group's name.
    pub name: String,
    /// `MinSize`.
    pub min_size: i32,
    /// `MaxSize`.
    pub max_size: i32,
    /// `NewInstancesProtectedFromScaleIn`.
    pub new_instances_protected: bool,
    /// The names of the group's suspended processes (`SuspendedProcesses`).
    pub suspended_processes: Vec<String>,
    /// How many Availability Zones the group spans.
    pub availability_zones: usize,
    /// The names of the group's scaling policies (`DescribePolicies`).
    pub scaling_policies: Vec<String>,
}

/// One thing in the group's settings that can work against flotilla, and its fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advice {
    /// What is wrong and what it can do.
    pub problem: String,
    /// The AWS CLI command that fixes it.
    pub fix: String,
}

impl fmt::Display for Advice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; fix: {}", self.problem, self.fix)
    }
}

/// Everything in `g` that GitLab's documentation advises against, in a stable order.
pub fn advise(g: &GroupFacts) -> Vec<Advice> {
    let name = &g.name;
    let mut out = Vec::new();
    if !g.new_instances_protected {
        out.push(Advice {
            problem: format!(
                "Auto Scaling group {name:?} does not protect new instances from scale-in: \
                 AWS may terminate an instance in the middle of a job when the group's \
                 desired capacity drops (a scaling policy, someone lowering it)"
            ),
            fix: format!(
                "aws autoscaling update-auto-scaling-group --auto-scaling-group-name {name} \
                 --new-instances-protected-from-scale-in (instances already running keep \
                 their setting: aws autoscaling set-instance-protection)"
            ),
        });
    }
    for policy in &g.scaling_policies {
        out.push(Advice {
            problem: format!(
                "Auto Scaling group {name:?} has the scaling policy {policy:?}: it changes the \
                 desired capacity behind flotilla's back, and the two fight"
            ),
            fix: format!(
                "aws autoscaling delete-policy --auto-scaling-group-name {name} \
                 --policy-name {policy}"
            ),
        });
    }
    let rebalance_suspended = g.suspended_processes.iter().any(|p| p == "AZRebalance");
    if g.availability_zones > 1 && !rebalance_suspended {
        out.push(Advice {
            problem: format!(
                "Auto Scaling group {name:?} spans {} Availability Zones and AZRebalance is \
                 not suspended: AWS may terminate busy instances to even out the zones",
                g.availability_zones
            ),
            fix: format!(
                "aws autoscaling suspend-processes --auto-scaling-group-name {name} \
                 --scaling-processes AZRebalance"
            ),
        });
    }
    if g.min_size > 0 {
        out.push(Advice {
            problem: format!(
                "Auto Scaling group {name:?} has a minimum size of {}: flotilla cannot \
                 remove instances below it (AWS refuses the termination), so idle \
                 instances beyond the policy stay and cost",
                g.min_size
            ),
            fix: format!(
                "aws autoscaling update-auto-scaling-group --auto-scaling-group-name {name} \
                 --min-size 0"
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> GroupFacts {
        GroupFacts {
            name: "ci".into(),
            min_size: 0,
            max_size: 10,
            new_instances_protected: true,
            suspended_processes: vec!["AZRebalance".into()],
            availability_zones: 3,
            scaling_policies: vec![],
        }
    }

    #[test]
    fn a_group_set_up_as_gitlab_advises_draws_no_advice() {
        assert!(advise(&good()).is_empty());
        let one_zone = GroupFacts {
            suspended_processes: vec![],
            availability_zones: 1,
            ..good()
        };
        assert!(
            advise(&one_zone).is_empty(),
            "AZRebalance matters only across zones"
        );
    }

    #[test]
    fn each_departure_is_named_with_its_fix() {
        let bad = GroupFacts {
            min_size: 1,
            new_instances_protected: false,
            suspended_processes: vec!["Launch".into()],
            scaling_policies: vec!["cpu-target".into()],
            ..good()
        };
        let advice = advise(&bad);
        assert_eq!(advice.len(), 4, "{advice:#?}");
        assert!(advice[0].problem.contains("scale-in"));
        assert!(
            advice[0]
                .fix
                .contains("--new-instances-protected-from-scale-in")
        );
        assert!(advice[1].problem.contains("\"cpu-target\""));
        assert!(advice[1].fix.contains("delete-policy"));
        assert!(advice[2].fix.contains("--scaling-processes AZRebalance"));
        assert!(advice[3].fix.contains("--min-size 0"));
        assert!(advice[3].to_string().contains("; fix: aws autoscaling"));
    }
}
