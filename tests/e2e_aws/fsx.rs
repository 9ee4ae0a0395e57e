//! fsx.lustre: a file system with an S3 import path, grown in place and
//! replaced.

use crate::support::aws::Aws;
use crate::support::moto::Moto;

const FSX: &str = r#"
[workflow]
name = "fsx"
region = "us-east-1"

[steps.vpc]
provider = "cloudformation.stack"
[steps.vpc.inputs]
stack_name = "flow-vpc"
template = "vpc.yaml"

[steps.data]
provider = "s3.bucket"
[steps.data.inputs]
name = "flow-training-data"

[steps.fsx]
provider = "fsx.lustre"
[steps.fsx.inputs]
storage_capacity = 1200
deployment_type = "SCRATCH_2"
subnet_ids = ["${steps.vpc.outputs.SubnetId}"]
security_group_ids = ["${steps.vpc.outputs.SecurityGroupId}"]
import_path = "s3://${steps.data.outputs.name}/train/"
export_path = "s3://${steps.data.outputs.name}/train/export/"
tags = { Name = "training" }
"#;

#[test]
fn fsx_lustre_with_an_s3_import_path() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", FSX);
    let apply = a.apply().expect(0);
    assert!(
        apply.stdout.contains("Apply complete: 3 created"),
        "{}",
        apply.stdout
    );
    let fs = moto.file_systems();
    assert_eq!(fs.len(), 1, "{fs:?}");
    let id = a
        .run(&["output", "wf.toml", "fsx.file_system_id"])
        .expect(0);
    assert_eq!(id.stdout.trim(), fs[0]);
    let dns = a.run(&["output", "wf.toml", "fsx.dns_name"]).expect(0);
    assert!(dns.stdout.contains(&fs[0]), "{}", dns.stdout);
    let v = moto.json_call(
        "fsx",
        "AWSSimbaAPIService_v20180301.DescribeFileSystems",
        "{}",
    );
    assert_eq!(
        v["FileSystems"][0]["LustreConfiguration"]["ImportPath"],
        "s3://flow-training-data/train/"
    );

    // Capacity grows in place; shrinking or moving replaces.
    a.p.write(
        "wf.toml",
        &FSX.replace("storage_capacity = 1200", "storage_capacity = 2400"),
    );
    let grow = a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    assert!(
        grow.stdout.contains("1 to update, 0 to replace"),
        "{}",
        grow.stdout
    );
    a.p.write(
        "wf.toml",
        &FSX.replace(
            r#"deployment_type = "SCRATCH_2""#,
            r#"deployment_type = "PERSISTENT_2""#,
        ),
    );
    let moved = a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    assert!(moved.stdout.contains("1 to replace"), "{}", moved.stdout);
    a.p.write("wf.toml", FSX);

    a.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert!(moto.file_systems().is_empty());
    assert!(moto.stacks().is_empty());
}
