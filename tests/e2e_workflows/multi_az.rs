//! multi-az: subnet lists made from the upstream template's joined outputs.

use super::*;

/// multi-az: the VPC's subnets come out as the upstream multi-AZ template
/// writes them, one comma-joined string per kind; `split` and `concat` turn
/// them into the EKS cluster's and FSx's subnet lists.
#[test]
fn multi_az_subnet_lists_from_joined_outputs() {
    validates_and_plans_offline("multi-az.toml");
    let moto = Moto::start();
    let l = Local::new("multi-az.toml", moto.env());
    let apply = l.flow(&["apply"], &["--auto-approve"]).expect(0);
    assert!(apply.stdout.contains("3 created"), "{}", apply.all());
    let private = l.output("vpc.PrivateSubnets");
    let public = l.output("vpc.PublicSubnets");
    let private: Vec<&str> = private.split(',').collect();
    let public: Vec<&str> = public.split(',').collect();
    assert_eq!(private.len(), 2, "{private:?}");
    assert!(
        private
            .iter()
            .chain(&public)
            .all(|s| s.starts_with("subnet-"))
    );
    let (status, body) = moto.rest_call("eks", "GET", "/clusters/multi-az", "");
    assert_eq!(status, 200, "{body}");
    let cluster: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let subnets: Vec<&str> = cluster["cluster"]["resourcesVpcConfig"]["subnetIds"]
        .as_array()
        .expect("subnets")
        .iter()
        .filter_map(|s| s.as_str())
        .collect();
    let every: Vec<&str> = private.iter().chain(&public).copied().collect();
    assert_eq!(subnets, every, "the cluster has every subnet, in order");
    let fs = moto.json_call(
        "fsx",
        "AWSSimbaAPIService_v20180301.DescribeFileSystems",
        "{}",
    );
    assert_eq!(
        fs["FileSystems"][0]["SubnetIds"],
        serde_json::json!([private[0]]),
        "{fs}"
    );
    l.flow(&["plan"], &["--detailed-exitcode"]).expect(0);
    l.flow(&["destroy"], &["--auto-approve"]).expect(0);
    assert_eq!(stack_status(&moto, "multi-az-vpc"), None);
}
