//! The cost estimate: regions, fallbacks, ranging counts, stopped fleets.

use super::*;

fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |k| {
        vars.iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn the_workflow_region_comes_first() {
    let vars = [
        ("AWS_REGION", "eu-west-1"),
        ("AWS_DEFAULT_REGION", "ap-northeast-1"),
    ];
    assert_eq!(
        step_region(Some("us-west-2".into()), env(&vars)).as_deref(),
        Some("us-west-2")
    );
}

#[test]
fn aws_region_is_used_when_the_workflow_names_none() {
    let vars = [
        ("AWS_REGION", "us-west-2"),
        ("AWS_DEFAULT_REGION", "eu-west-1"),
    ];
    assert_eq!(step_region(None, env(&vars)).as_deref(), Some("us-west-2"));
    let vars = [("AWS_REGION", ""), ("AWS_DEFAULT_REGION", "eu-west-1")];
    assert_eq!(step_region(None, env(&vars)).as_deref(), Some("eu-west-1"));
    assert_eq!(step_region(None, env(&[])), None);
}

/// A workflow of `steps`, each `(name, region, instance type)`, planned
/// from empty state and priced with the built-in table and `vars` as
/// the environment.
fn priced_plan(
    workflow_region: Option<&str>,
    steps: &[(&str, Option<&str>, &str)],
    vars: &[(&str, &str)],
) -> Plan {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("[workflow]\nname = \"costed\"\n");
    if let Some(r) = workflow_region {
        text.push_str(&format!("region = \"{r}\"\n"));
    }
    for (name, region, ty) in steps {
        text.push_str(&format!("\n[steps.{name}]\nprovider = \"eks.nodegroup\"\n"));
        if let Some(r) = region {
            text.push_str(&format!("region = \"{r}\"\n"));
        }
        text.push_str(&format!(
            "[steps.{name}.inputs]\ncluster = \"c\"\nname = \"{name}\"\n\
             instance_types = [\"{ty}\"]\ndesired_size = 2\nsubnet_ids = [\"subnet-1\"]\n"
        ));
    }
    let path = dir.path().join("wf.toml");
    std::fs::write(&path, text).unwrap();
    let registry = flow_providers::Registry::builtin();
    let no_env = |_: &str| None;
    let loaded = crate::lang::load::load(&path, &Default::default(), &registry, &no_env)
        .unwrap_or_else(|d| panic!("{d:?}"));
    let records = BTreeMap::new();
    let req = crate::plan::PlanRequest {
        loaded: &loaded,
        registry: &registry,
        records: &records,
        legacy_salt: &[0u8; 32],
        serial: 0,
        targets: &[],
        replace: &[],
    };
    let mut plan = crate::plan::compute_plan(&req).unwrap();
    let vars = env(vars);
    estimate_with_env(
        &mut plan,
        &loaded,
        &registry,
        &records,
        &PriceTable::builtin(),
        &vars,
    );
    plan
}

fn step_cost<'a>(plan: &'a Plan, step: &str) -> &'a StepCost {
    plan.changes
        .iter()
        .find(|c| c.step == step)
        .and_then(|c| c.cost.as_ref())
        .unwrap()
}

#[test]
fn a_us_west_2_step_is_priced_from_the_us_west_2_table() {
    let plan = priced_plan(Some("us-west-2"), &[("gpu", None, "p4d.24xlarge")], &[]);
    let table = PriceTable::builtin();
    let cost = step_cost(&plan, "gpu");
    assert_eq!(cost.region.as_deref(), Some("us-west-2"));
    let west = table.regions["us-west-2"].instances["p4d.24xlarge"];
    assert!((cost.after_per_hour - 2.0 * west).abs() < 1e-9);
    assert!(cost.notes.is_empty(), "{:?}", cost.notes);
    let total = plan.cost.as_ref().unwrap();
    assert_eq!(
        total.prices_note().unwrap(),
        "on-demand, us-west-2 prices of 2026-11-01"
    );
}

#[test]
fn a_tokyo_step_costs_what_tokyo_charges() {
    let plan = priced_plan(
        Some("ap-northeast-1"),
        &[("gpu", None, "p4d.24xlarge")],
        &[],
    );
    let cost = step_cost(&plan, "gpu");
    assert!((cost.after_per_hour - 2.0 * 30.09784).abs() < 1e-9);
}

#[test]
fn a_region_without_a_table_falls_back_and_says_so() {
    let plan = priced_plan(
        None,
        &[
            ("west", Some("us-west-2"), "p4d.24xlarge"),
            ("north", Some("eu-north-1"), "p4d.24xlarge"),
        ],
        &[],
    );
    let north = step_cost(&plan, "north");
    let east = PriceTable::builtin().default.instances["p4d.24xlarge"];
    assert!((north.after_per_hour - 2.0 * east).abs() < 1e-9);
    assert_eq!(
        north.notes,
        ["priced at us-east-1's: the price table has no eu-north-1 prices"]
    );
    let total = plan.cost.as_ref().unwrap();
    assert!(total.mixed_regions());
    assert_eq!(
        total.prices_note().unwrap(),
        "on-demand, prices of 2026-11-01: eu-north-1 priced at us-east-1's, \
         no table for it; us-west-2"
    );
}

#[test]
fn a_type_missing_from_its_region_is_named() {
    let plan = priced_plan(Some("eu-west-1"), &[("gpu", None, "p5.48xlarge")], &[]);
    let cost = step_cost(&plan, "gpu");
    assert_eq!(
        cost.notes,
        ["p5.48xlarge at us-east-1's price: not in the eu-west-1 table"]
    );
    assert_eq!(
        plan.cost.as_ref().unwrap().prices_note().unwrap(),
        "on-demand, prices of 2026-11-01: eu-west-1 with p5.48xlarge at us-east-1's, \
         not in its table"
    );
}

#[test]
fn aws_region_prices_a_workflow_that_names_none() {
    let plan = priced_plan(
        None,
        &[("gpu", None, "p4d.24xlarge")],
        &[("AWS_REGION", "ap-northeast-1")],
    );
    assert_eq!(
        step_cost(&plan, "gpu").region.as_deref(),
        Some("ap-northeast-1")
    );
    assert_eq!(
        plan.cost.as_ref().unwrap().prices_note().unwrap(),
        "on-demand, ap-northeast-1 prices of 2026-11-01"
    );
    let plan = priced_plan(None, &[("gpu", None, "p4d.24xlarge")], &[]);
    assert_eq!(step_cost(&plan, "gpu").region, None);
    assert_eq!(
        plan.cost.as_ref().unwrap().prices_note().unwrap(),
        "on-demand, prices of 2026-11-01: no region set, priced at us-east-1's"
    );
}
/// A ParallelCluster of one head node and a queue of 0 to 4 p5 nodes,
/// planned from `records` (empty: a create) and priced in us-east-1.
fn cluster_plan(records: &BTreeMap<String, StepRecord>, with_step: bool) -> Plan {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cluster.yaml"),
        "HeadNode:\n  InstanceType: m5.4xlarge\nScheduling:\n  Scheduler: slurm\n  \
         SlurmQueues:\n    - Name: gpu\n      ComputeResources:\n        - Name: p5\n          \
         InstanceType: p5.48xlarge\n          MinCount: 0\n          MaxCount: 4\n",
    )
    .unwrap();
    let mut text = String::from("[workflow]\nname = \"pc\"\nregion = \"us-east-1\"\n");
    if with_step {
        text.push_str(
            "[steps.cluster]\nprovider = \"parallelcluster.cluster\"\n\
             [steps.cluster.inputs]\ncluster_name = \"ml\"\nconfig = \"cluster.yaml\"\n",
        );
    }
    let path = dir.path().join("wf.toml");
    std::fs::write(&path, text).unwrap();
    let registry = flow_providers::Registry::builtin();
    let loaded = crate::lang::load::load(&path, &Default::default(), &registry, &|_| None)
        .unwrap_or_else(|d| panic!("{d:?}"));
    let req = crate::plan::PlanRequest {
        loaded: &loaded,
        registry: &registry,
        records,
        legacy_salt: &[0u8; 32],
        serial: 0,
        targets: &[],
        replace: &[],
    };
    let mut plan = crate::plan::compute_plan(&req).unwrap();
    estimate_with_env(
        &mut plan,
        &loaded,
        &registry,
        records,
        &PriceTable::builtin(),
        &|_| None,
    );
    plan
}

/// A queue that scales from 0 to 4 nodes costs the head node at the
/// least and the four nodes besides at the most, and the plan says so.
#[test]
fn a_queue_whose_count_ranges_is_priced_at_most_and_at_least() {
    let plan = cluster_plan(&BTreeMap::new(), true);
    let east = &PriceTable::builtin().default.instances;
    let (head, p5) = (east["m5.4xlarge"], east["p5.48xlarge"]);
    let cost = step_cost(&plan, "cluster");
    assert_eq!(cost.items, ["1 × m5.4xlarge", "0–4 × p5.48xlarge"]);
    assert!((cost.after_per_hour - (head + 4.0 * p5)).abs() < 1e-9);
    assert_eq!(cost.after_least_per_hour, Some(head));
    let total = plan.cost.as_ref().unwrap();
    assert!(total.ranges);
    assert!((total.starts_least_per_hour - head).abs() < 1e-9);
    let text = crate::plan::render::render_text(&plan, &crate::style::Style::default());
    let most = crate::plan::render::dollars(head + 4.0 * p5);
    let least = crate::plan::render::dollars(head);
    assert!(
        text.contains(&format!(
            "      at most ≈ {most}/h, at least ≈ {least}/h (1 × m5.4xlarge, 0–4 × p5.48xlarge)\n"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "Cost: this plan starts at most ≈ {most}/h, at least ≈ {least}/h ("
        )),
        "{text}"
    );
}

/// A cluster whose compute fleet is stopped, deleted: it stops the
/// head node only, and says the queue is stopped; running, it stops
/// from the head node alone up to the whole queue.
#[test]
fn a_stopped_fleet_is_priced_as_stopped() {
    let record = |status: &str| {
        let mut r = StepRecord::new("cluster", "parallelcluster.cluster", 0);
        r.applied = true;
        r.region = Some("us-east-1".into());
        r.inputs = serde_json::from_value(
            serde_json::json!({"cluster_name": "ml", "config": "cluster.yaml"}),
        )
        .unwrap();
        r.outputs =
            serde_json::from_value(serde_json::json!({"compute_fleet_status": status})).unwrap();
        BTreeMap::from([("cluster".to_string(), r)])
    };
    let head = PriceTable::builtin().default.instances["m5.4xlarge"];
    let plan = cluster_plan(&record("STOPPED"), false);
    let cost = step_cost(&plan, "cluster");
    assert_eq!(cost.items, ["1 × m5.4xlarge", "0–4 × p5.48xlarge, stopped"]);
    assert!((cost.before_per_hour - head).abs() < 1e-9);
    assert_eq!(cost.before_least_per_hour, None);
    let text = crate::plan::render::render_text(&plan, &crate::style::Style::default());
    assert!(
        text.contains(&format!(
            "      stops ≈ {}/h (1 × m5.4xlarge, 0–4 × p5.48xlarge, stopped)\n",
            crate::plan::render::dollars(head)
        )),
        "{text}"
    );
    let running = cluster_plan(&record("RUNNING"), false);
    let cost = step_cost(&running, "cluster");
    assert_eq!(cost.items, ["1 × m5.4xlarge", "0–4 × p5.48xlarge"]);
    assert_eq!(cost.before_least_per_hour, Some(head));
    assert!(cost.before_per_hour > head);
}
