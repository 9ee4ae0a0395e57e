//! Which queue changes pcluster takes with the compute fleet running:
//! counts that only grow. aws-parallelcluster 3.16.1 gives `MaxCount` and
//! `MinCount` the update policy `RESIZE_UPDATE_STRATEGY_ON_REMOVE`
//! (`pcluster/schemas/cluster_schema.py`), whose check
//! (`condition_checker_resize_update_strategy_on_remove` in
//! `pcluster/config/update_policy.py`) lets a running fleet take a
//! `MaxCount` that does not go down, and a `MinCount` change when the
//! `MaxCount` beside it grows by at least as much. Anything else in the
//! queues is taken as needing the fleet stopped.

use super::config::{ComputeResource, Queue};

/// Whether `after` differs from `before` only in counts that pcluster
/// updates with the fleet running.
pub(super) fn grows_only(before: &[Queue], after: &[Queue]) -> bool {
    before.len() == after.len()
        && before.iter().zip(after).all(|(b, a)| {
            b.name == a.name
                && b.capacity_type == a.capacity_type
                && b.placement_group == a.placement_group
                && b.subnets == a.subnets
                && b.image == a.image
                && b.resources.len() == a.resources.len()
                && b.resources
                    .iter()
                    .zip(&a.resources)
                    .all(|(rb, ra)| resource_grows(rb, ra))
        })
}

fn resource_grows(before: &ComputeResource, after: &ComputeResource) -> bool {
    let same_but_counts = ComputeResource {
        min: before.min,
        max: before.max,
        ..after.clone()
    } == *before;
    let grown_max = after.max as i128 - before.max as i128;
    let grown_min = after.min as i128 - before.min as i128;
    let max_ok = grown_max >= 0;
    // A MinCount change needs a MaxCount change beside it of at least as much.
    let min_ok = grown_min == 0 || (grown_max != 0 && grown_max >= grown_min);
    same_but_counts && max_ok && min_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(min: u64, max: u64) -> Vec<Queue> {
        vec![Queue {
            name: "gpu".into(),
            capacity_type: "ONDEMAND".into(),
            placement_group: true,
            subnets: vec!["subnet-1".into()],
            image: None,
            resources: vec![ComputeResource {
                name: "p5".into(),
                instance_types: vec!["p5.48xlarge".into()],
                min,
                max,
                efa: true,
                reservation: None,
            }],
        }]
    }

    #[test]
    fn a_max_count_that_grows_is_taken_running_one_that_shrinks_is_not() {
        assert!(grows_only(&queue(0, 2), &queue(0, 3)));
        assert!(!grows_only(&queue(0, 4), &queue(0, 3)));
    }

    #[test]
    fn a_min_count_change_needs_max_count_to_grow_at_least_as_much() {
        assert!(grows_only(&queue(1, 2), &queue(2, 3)));
        assert!(grows_only(&queue(1, 2), &queue(2, 4)));
        assert!(!grows_only(&queue(1, 2), &queue(3, 3)));
        // Alone, even down: pcluster finds no MaxCount change beside it.
        assert!(!grows_only(&queue(1, 2), &queue(0, 2)));
        assert!(!grows_only(&queue(1, 2), &queue(2, 2)));
    }

    #[test]
    fn any_other_queue_change_is_not_a_resize() {
        let mut other = queue(0, 3);
        other[0].resources[0].instance_types = vec!["p4d.24xlarge".into()];
        assert!(!grows_only(&queue(0, 2), &other));
        let mut other = queue(0, 3);
        other[0].subnets.push("subnet-2".into());
        assert!(!grows_only(&queue(0, 2), &other));
        // A queue's own image (`Image.CustomAmi`): its nodes are replaced.
        let mut other = queue(0, 3);
        other[0].image = Some("ami-0b".into());
        assert!(!grows_only(&queue(0, 2), &other));
        let mut two = queue(0, 2);
        two.extend(queue(0, 2).into_iter().map(|q| Queue {
            name: "cpu".into(),
            ..q
        }));
        assert!(!grows_only(&queue(0, 2), &two));
    }
}
