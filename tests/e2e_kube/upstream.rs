//! The runbook's published files as a user brings them
//! (tests/fixtures/upstream/, unmodified: their digests are checked), wired
//! by tests/fixtures/upstream/runbook.toml, the README's "bring your
//! runbook" workflow: validated and planned whole, the AWS half (the
//! multi-AZ VPC template and the eksctl config without `vpc:`) applied to
//! moto and destroyed.

use sha2::{Digest, Sha256};

use crate::support::Project;
use crate::support::moto::Moto;

fn upstream() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/upstream")
}

/// The files as tests/fixtures/upstream/SOURCE records them: name and digest.
fn recorded() -> Vec<(String, String)> {
    let source = std::fs::read_to_string(upstream().join("SOURCE")).unwrap();
    let lines: Vec<&str> = source.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter_map(|(i, line)| {
            let digest = line.trim().strip_prefix("sha256 ")?;
            let name = lines[i - 3].trim();
            Some((name.to_string(), digest.to_string()))
        })
        .collect()
}

#[test]
fn the_published_files_are_copied_unmodified() {
    let files = recorded();
    assert_eq!(files.len(), 4, "{files:?}");
    for (name, digest) in files {
        let bytes = std::fs::read(upstream().join(&name)).unwrap();
        assert_eq!(
            hex::encode(Sha256::digest(&bytes)),
            digest,
            "{name} differs from the published file"
        );
    }
}

#[test]
fn the_runbook_files_run_unmodified() {
    let moto = Moto::start();
    let env = moto.env();
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    env.push(("HF_TOKEN", "hf_secret_for_the_test_only"));
    let p = Project::new();
    for (name, _) in recorded() {
        let text = std::fs::read_to_string(upstream().join(&name)).unwrap();
        p.write(&name, &text);
    }
    let workflow = std::fs::read_to_string(upstream().join("runbook.toml")).unwrap();
    assert!(workflow.lines().count() < 60, "the README's workflow grew");
    let readme = std::fs::read_to_string(upstream().join("../../../README.md")).unwrap();
    assert!(
        readme.contains(&format!("```toml\n{workflow}```")),
        "README's \"Bring your runbook\" shows another workflow than tests/fixtures/upstream/runbook.toml"
    );
    p.write("runbook.toml", &workflow);

    p.run_env(&["validate", "runbook.toml"], &env).expect(0);
    let plan = p.run_env(&["plan", "runbook.toml"], &env).expect(0);
    for line in [
        "+ cluster eks-p4de-odcr (Kubernetes 1.32, subnets (known after apply)",
        "+ managed node group p4de-odcr: p4de.24xlarge × 0..10 (desired 2); EFA: 4 interfaces per node; capacity reservation cr-0123456789abcdef0",
        "+ managed node group sys: c5.2xlarge × 1..1 (desired 1)",
        "(1 × c5.2xlarge, 2 × p4de.24xlarge)",
        "(on-demand, us-east-1 prices of ",
    ] {
        assert!(
            plan.stdout.contains(line),
            "{line} missing from\n{}",
            plan.stdout
        );
    }
    assert!(!plan.all().contains("hf_secret_for_the_test_only"));

    // The AWS half: the VPC template's subnets, split, become the cluster's.
    let apply = p
        .run_env(
            &[
                "apply",
                "runbook.toml",
                "--target",
                "cluster",
                "--auto-approve",
            ],
            &env,
        )
        .expect(0);
    assert!(apply.stdout.contains("2 created"), "{}", apply.all());
    let private = p
        .run_env(&["output", "runbook.toml", "vpc.PrivateSubnets"], &env)
        .expect(0)
        .stdout
        .trim()
        .to_string();
    let private: Vec<&str> = private.split(',').collect();
    assert_eq!(private.len(), 2, "{private:?}");
    let (_, cluster) = moto.rest_call("eks", "GET", "/clusters/eks-p4de-odcr", "");
    let cluster: serde_json::Value = serde_json::from_str(&cluster).unwrap();
    assert_eq!(
        cluster["cluster"]["resourcesVpcConfig"]["subnetIds"],
        serde_json::json!(private),
        "{cluster}"
    );
    let (_, ng) = moto.rest_call(
        "eks",
        "GET",
        "/clusters/eks-p4de-odcr/node-groups/p4de-odcr",
        "",
    );
    let ng: serde_json::Value = serde_json::from_str(&ng).unwrap();
    assert_eq!(ng["nodegroup"]["subnets"], serde_json::json!(private));
    // No VPC of flow's: the step's subnets won.
    assert!(
        !moto
            .stacks()
            .contains(&"flow-eks-eks-p4de-odcr-vpc".to_string())
    );

    let d = p
        .run_env(&["destroy", "runbook.toml", "--auto-approve"], &env)
        .expect(0);
    assert!(d.stdout.contains("2 deleted"), "{}", d.all());
    assert!(moto.stacks().is_empty(), "{:?}", moto.stacks());
    let xml = moto.query_call("ec2", "Action=DescribeVpcs&Version=2016-11-15");
    assert_eq!(
        xml.matches("<vpcId>").count(),
        1,
        "only the default VPC is left: {xml}"
    );
}
