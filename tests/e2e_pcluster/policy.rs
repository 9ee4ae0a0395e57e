//! Bucket policies whose `aws:SecureTransport` condition the local cloud
//! evaluates (scripts/local-cloud/cloud_pcluster_s3policy.py): the policy
//! ParallelCluster puts on its own bucket, made by pcluster 3.16.1's own
//! code, denies a request over plain HTTP as AWS does, and a statement
//! whose condition does not hold does not apply.

use std::process::Command;

use super::pcluster;
use super::support::moto::Moto;

/// Run with pcluster's Python (its boto3 and its `S3Bucket`) against the
/// test's moto, over plain HTTP: GetObject under pcluster's policy, then
/// under the same Deny with the condition turned round.
const SCRIPT: &str = r#"
import json, boto3, botocore
from pcluster.models.s3_bucket import S3Bucket
s3 = boto3.client("s3")
name = "flow-policy-check"
s3.create_bucket(Bucket=name)
s3.put_object(Bucket=name, Key="k", Body=b"x")
policy = S3Bucket(service_name="parallelcluster", stack_name="c", artifact_directory="c", name=name)._generate_bucket_policy()
def get():
    try:
        s3.get_object(Bucket=name, Key="k")["Body"].read()
        return "allowed"
    except botocore.exceptions.ClientError as e:
        return "denied " + e.response["Error"]["Code"]
out = {"condition": policy["Statement"][0]["Condition"]}
s3.put_bucket_policy(Bucket=name, Policy=json.dumps(policy))
out["pcluster_policy_over_http"] = get()
policy["Statement"][0]["Condition"] = {"Bool": {"aws:SecureTransport": "true"}}
s3.put_bucket_policy(Bucket=name, Policy=json.dumps(policy))
out["deny_over_tls_only_over_http"] = get()
print(json.dumps(out))
"#;

/// Fails, naming the answer, if the condition is not evaluated: moto's own
/// S3 applies the Deny to both requests ("denied 403" for the second).
#[test]
fn a_bucket_policy_s_secure_transport_condition_is_evaluated_per_request() {
    let moto = Moto::start();
    let python = std::path::Path::new(&pcluster()).with_file_name("python");
    let mut cmd = Command::new(python);
    cmd.args(["-c", SCRIPT]);
    for (k, v) in moto.env() {
        cmd.env(k, v);
    }
    cmd.env("AWS_DEFAULT_REGION", "us-east-1");
    let out = cmd.output().expect("run pcluster's python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        got["condition"]["Bool"]["aws:SecureTransport"], "false",
        "pcluster's policy: {got}"
    );
    assert_eq!(got["pcluster_policy_over_http"], "denied 403", "{got}");
    assert_eq!(got["deny_over_tls_only_over_http"], "allowed", "{got}");
}
