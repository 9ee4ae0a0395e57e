//! The kubelets of an EKS cluster's managed node groups, and the AWS cloud
//! controller manager's node lifecycle controller, played for the tests
//! against the local cloud: each running EC2 instance that the local
//! cloud's node group Auto Scaling groups launched (tagged
//! `eks:cluster-name`, see scripts/local-cloud/cloud_eks_nodegroup_asg.py)
//! becomes a Ready Node as an EKS AMI's kubelet registers one: named by the
//! instance's private DNS name, `spec.providerID` `aws:///ZONE/INSTANCE-ID`
//! (what the AWS cloud provider sets), labelled with its node group
//! (`eks.amazonaws.com/nodegroup`), instance type, zone and hostname. The
//! Node of an instance that is no longer running is deleted, as the cloud
//! controller manager deletes the Node of a terminated instance
//! (https://kubernetes.io/docs/concepts/architecture/cloud-controller/#node-controller).
//!
//! A test can hold either part ([`Kubelets::hold_registration`],
//! [`Kubelets::hold_removal`]) to stand for a slow boot or a slow
//! controller.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::KubeServer;
use crate::support::moto::Moto;

/// A running instance as EC2 describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// `i-…`.
    pub id: String,
    /// Its private DNS name: the Node's name.
    pub dns: String,
    /// Its type.
    pub instance_type: String,
    /// Its Availability Zone.
    pub zone: String,
    /// Its `eks:nodegroup-name` tag.
    pub nodegroup: String,
    /// Its `aws:autoscaling:groupName` tag (the Auto Scaling group that
    /// launched it).
    pub group: Option<String>,
}

/// The kubelets of one cluster's node groups.
pub struct Kubelets {
    cluster: String,
    stop: Arc<AtomicBool>,
    registration_held: AtomicBool,
    removal_held: AtomicBool,
    /// The Nodes registered here, by name: the only ones removed here.
    registered: Mutex<BTreeSet<String>>,
}

/// Stops the kubelets when dropped, so that a failed assertion ends the
/// test instead of waiting on their thread.
pub struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The text of `node`'s child element `name`.
fn child<'a>(node: roxmltree::Node<'a, 'a>, name: &str) -> Option<roxmltree::Node<'a, 'a>> {
    node.children().find(|c| c.tag_name().name() == name)
}

/// The running instances of `cluster`'s node groups, by DescribeInstances.
pub fn instances(moto: &Moto, cluster: &str) -> Vec<Instance> {
    let xml = moto.query_call(
        "ec2",
        &format!(
            "Action=DescribeInstances&Version=2016-11-15&Filter.1.Name=tag%3Aeks%3Acluster-name&Filter.1.Value.1={cluster}&Filter.2.Name=instance-state-name&Filter.2.Value.1=running"
        ),
    );
    let doc = roxmltree::Document::parse(&xml).expect("DescribeInstances XML");
    let text = |n: Option<roxmltree::Node>| n.and_then(|n| n.text()).map(str::to_string);
    doc.descendants()
        .filter(|n| n.tag_name().name() == "instancesSet")
        .flat_map(|set| set.children().filter(|c| c.tag_name().name() == "item"))
        .filter_map(|i| {
            let tags = child(i, "tagSet")?;
            let tag = |key: &str| {
                tags.children()
                    .find(|t| text(child(*t, "key")).as_deref() == Some(key))
                    .and_then(|t| text(child(t, "value")))
            };
            let nodegroup = tag("eks:nodegroup-name")?;
            Some(Instance {
                id: text(child(i, "instanceId"))?,
                dns: text(child(i, "privateDnsName"))?,
                instance_type: text(child(i, "instanceType"))?,
                zone: text(child(i, "placement").and_then(|p| child(p, "availabilityZone")))?,
                nodegroup,
                group: tag("aws:autoscaling:groupName"),
            })
        })
        .collect()
}

impl Kubelets {
    /// The kubelets of `cluster`'s node groups (started by [`Kubelets::watch`]).
    pub fn new(cluster: &str) -> Kubelets {
        Kubelets {
            cluster: cluster.to_string(),
            stop: Arc::new(AtomicBool::new(false)),
            registration_held: AtomicBool::new(false),
            removal_held: AtomicBool::new(false),
            registered: Mutex::default(),
        }
    }

    /// Registers and removes Nodes on a thread of `scope` until the
    /// returned guard is dropped.
    pub fn watch<'s>(
        &'s self,
        scope: &'s std::thread::Scope<'s, '_>,
        moto: &'s Moto,
        k: &'s KubeServer,
    ) -> StopOnDrop {
        scope.spawn(move || {
            while !self.stop.load(Ordering::SeqCst) {
                self.tick(moto, k);
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        StopOnDrop(self.stop.clone())
    }

    /// While `held`, no new instance registers a Node (a slow boot).
    pub fn hold_registration(&self, held: bool) {
        self.registration_held.store(held, Ordering::SeqCst);
    }

    /// While `held`, the Node of a terminated instance stays (a slow
    /// cloud controller manager).
    pub fn hold_removal(&self, held: bool) {
        self.removal_held.store(held, Ordering::SeqCst);
    }

    /// One pass: a Node for each running instance, none for a gone one.
    pub fn tick(&self, moto: &Moto, k: &KubeServer) {
        let running = instances(moto, &self.cluster);
        if !self.registration_held.load(Ordering::SeqCst) {
            for i in &running {
                if k.get(&format!("/api/v1/nodes/{}", i.dns)).is_none() {
                    register(k, i);
                    self.registered.lock().unwrap().insert(i.dns.clone());
                }
            }
        }
        if self.removal_held.load(Ordering::SeqCst) {
            return;
        }
        let ids: BTreeSet<&str> = running.iter().map(|i| i.id.as_str()).collect();
        let nodes = k.get("/api/v1/nodes").unwrap_or_default();
        let mut registered = self.registered.lock().unwrap();
        for n in nodes["items"].as_array().into_iter().flatten() {
            let name = n["metadata"]["name"].as_str().unwrap_or_default();
            let Some(id) = n["spec"]["providerID"]
                .as_str()
                .and_then(|p| p.strip_prefix("aws:///"))
                .and_then(|p| p.rsplit('/').next())
            else {
                continue;
            };
            if registered.contains(name) && !ids.contains(id) {
                k.delete(&format!("/api/v1/nodes/{name}"));
                registered.remove(name);
            }
        }
    }
}

/// The Node `i`'s kubelet registers, Ready.
fn register(k: &KubeServer, i: &Instance) {
    let node: Value = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": i.dns, "labels": {
            "eks.amazonaws.com/nodegroup": i.nodegroup,
            "kubernetes.io/hostname": i.dns,
            "node.kubernetes.io/instance-type": i.instance_type,
            "topology.kubernetes.io/zone": i.zone}},
        "spec": {"providerID": format!("aws:///{}/{}", i.zone, i.id)}});
    k.post("/api/v1/nodes", &node);
    k.merge_patch(
        &format!("/api/v1/nodes/{}/status", i.dns),
        &json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}),
    );
}
