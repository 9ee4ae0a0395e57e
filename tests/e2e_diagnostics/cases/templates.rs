//! The files a step is given, checked offline: placeholders left in
//! templates, kustomize outside the subset, an eksctl file with a VPC but no
//! subnets, and the EFA rules in CloudFormation and eksctl files.

use super::super::{BASE, Case, check};

corpus! {
    // ---- placeholders and kustomize ----------------------------------------
    substitute_placeholder_left: Case {
        file: "126-substitute-placeholder-left.toml",
        codes: &["flow::invalid-input"],
        at: &["10:9", "11:33"],
        problems: 3,
        says: &[
            "templates/nccl-tests.yaml:14:22: the placeholder `<account>` has no value",
            "templates/nccl-tests.yaml:14:40: the placeholder `<region>` has no value",
            "add it to the step's `substitute`: \"<account>\" = \"…\"",
            "`GPU_PER_NOD` matches nothing in `templates/nccl-tests.yaml`",
        ],
        never_says: &["$PATH"],
        ..BASE
    },
    kustomize_outside_the_subset: Case {
        file: "127-kustomize-outside-the-subset.toml",
        codes: &["flow::invalid-input"],
        at: &["11:10"],
        problems: 1,
        says: &[
            "templates/kustomize-outside/kustomization.yaml:2:5:",
            "is a remote resource",
            "vendor it: copy the folder at a pinned commit",
        ],
        ..BASE
    },
    required_placeholder_left: Case {
        file: "128-required-placeholder-left.toml",
        codes: &["flow::invalid-input"],
        at: &["11:9"],
        problems: 1,
        says: &[
            "templates/fsdp-job.yaml-template:19:35: the placeholder `$GPU_PER_NODE`",
            "add it to the step's `substitute`: GPU_PER_NODE = \"…\"",
        ],
        never_says: &["`$PATH", "`$MAX_NODES`", "`${IMAGE_URI}`"],
        ..BASE
    },

    // ---- eksctl and the EFA rules ------------------------------------------
    eksctl_vpc_id_without_subnets: Case {
        file: "129-eksctl-vpc-id-without-subnets.toml",
        codes: &["flow::invalid-input"],
        at: &["10:17"],
        problems: 1,
        says: &[
            "templates/eksctl-vpc-id-only.yaml:7:3: the eksctl config sets `vpc.id`",
            "lists no subnets",
            "eksctl would not make a VPC then",
            "or set `subnet_ids` on the step",
        ],
        ..BASE
    },

    efa_batch_two_zones: Case {
        file: "160-efa-batch-two-zones.toml",
        codes: &["flow::invalid-input"],
        at: &["11:12"],
        problems: 1,
        says: &[
            "templates/batch-efa-two-zones.yaml:58:9: EFA compute environment",
            "spans 2 Availability Zones",
            "`SubnetA` in the region's zone #0",
            "`SubnetB`",
            "EFA traffic does not cross zones",
            "list subnets of one zone only, e.g. Subnets: [!Ref SubnetA]",
        ],
        ..BASE
    },
    efa_security_group_no_self_egress: Case {
        file: "161-efa-security-group-no-self-egress.toml",
        codes: &["flow::invalid-input"],
        at: &["10:12"],
        problems: 1,
        says: &[
            "templates/batch-efa-no-self-egress.yaml:20:3: security group `EfaGroup`",
            "allow all traffic out to itself",
            "Type: AWS::EC2::SecurityGroupEgress",
            "DestinationSecurityGroupId: !Ref EfaGroup",
        ],
        never_says: &["in from itself"],
        ..BASE
    },
    efa_on_a_type_without_efa: Case {
        file: "162-efa-on-a-type-without-efa.toml",
        codes: &["flow::invalid-input"],
        at: &["12:12", "17:17", "24:19"],
        problems: 3,
        says: &[
            "templates/batch-efa-no-efa-type.yaml:57:25: instance type",
            "templates/eksctl-efa-no-efa-type.yaml:11:5: node group",
            "step `gpu`: instance type `g5.2xlarge` has no EFA",
            "g5.48xlarge (1)",
        ],
        ..BASE
    },
    efa_eksctl_two_zones: Case {
        file: "163-efa-eksctl-two-zones.toml",
        codes: &["flow::invalid-input"],
        at: &["9:17"],
        problems: 1,
        says: &[
            "templates/eksctl-efa-two-zones.yaml:11:5: node group",
            "2 Availability Zones (us-east-1a, us-east-1b)",
            "availabilityZones: [us-east-1a]",
        ],
        ..BASE
    },
    // ---- outputs a step will not have (issue 42) ---------------------------
    output_not_in_template: Case {
        file: "173-output-not-in-template.toml",
        codes: &["flow::unknown-output"],
        at: &["16:8"],
        says: &[
            "step `vpc` has no output `VpcId`",
            "did you mean `VPC`?",
            "(its template templates/vpc-outputs.yaml)",
        ],
        never_says: &["SecondSubnet`", "stack_id`"],
        ..BASE
    },
    output_a_kind_never_gives: Case {
        file: "175-output-a-kind-never-gives.toml",
        codes: &["flow::unknown-output", "flow::unknown-output"],
        at: &["29:11", "31:8"],
        says: &[
            "step `bucket` has no output `nme`",
            "did you mean `name`?",
            "(as every s3.bucket step does)",
            "step `fs` has no output `dns`",
            "did you mean `dns_name`?",
        ],
        never_says: &["no output `name`", "no output `mount_name`", "no output `anything`"],
        problems: 2,
        ..BASE
    },
    output_an_eks_cluster_never_gives: Case {
        file: "176-output-an-eks-cluster-never-gives.toml",
        codes: &["flow::unknown-output", "flow::unknown-output"],
        at: &["25:13", "28:10"],
        says: &[
            "step `cluster` has no output `endpont`",
            "did you mean `endpoint`?",
            "(as every eks.cluster step does)",
            "step `nccl` has no output `bus_bw`",
            "did you mean `busbw`?",
            "with what its `capture` and `parse` take",
        ],
        never_says: &[
            "no output `certificate_authority`",
            "no output `vpc_id`",
            "no output `busbw`",
            "no output `log_stream`",
        ],
        problems: 2,
        ..BASE
    },
}
