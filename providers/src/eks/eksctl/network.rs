//! Where an eksctl config's subnets come from, and where each node
//! group's nodes go in them.

use super::Subnets;
use crate::eks::vpc::VpcRequest;

/// Where the cluster's subnets come from, as the file says.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Network {
    /// `vpc.subnets` lists them (the node groups are placed in them).
    Listed,
    /// `vpc.id` names a VPC but no subnet of it is listed.
    Unlisted {
        /// The VPC's id.
        vpc_id: String,
    },
    /// No `vpc.subnets` and no `vpc.id`: eksctl makes the VPC.
    Made(VpcRequest),
    /// The same, but the VPC cannot be made as the file asks (one zone, a
    /// bad block, a node group's zone outside the file's): an error unless
    /// the step gives `subnet_ids`, which then win.
    Unmakeable(String),
    /// No file (a cluster from inputs alone).
    #[default]
    None,
}

/// Where one node group's nodes go, before the subnets are known.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Placement {
    /// Its `availabilityZones` (empty: every zone).
    pub zones: Vec<String>,
    /// Its `privateNetworking`.
    pub private_networking: bool,
}

impl Placement {
    /// The subnets the node group takes out of `private` and `public`.
    pub fn subnets(&self, private: &Subnets, public: &Subnets) -> Result<Vec<String>, String> {
        let pool = if self.private_networking || public.is_empty() {
            private
        } else {
            public
        };
        let ids = pool
            .iter()
            .filter(|(az, _)| self.zones.is_empty() || self.zones.contains(az))
            .map(|(_, id)| id.clone())
            .collect::<Vec<_>>();
        if ids.is_empty() {
            return Err(format!("no subnet of the VPC is in zones {:?}", self.zones));
        }
        Ok(ids)
    }

    /// Which subnets the plan says it takes.
    pub fn describe(&self) -> String {
        let kind = if self.private_networking {
            "private"
        } else {
            "public"
        };
        if self.zones.is_empty() {
            format!("the VPC's {kind} subnets")
        } else {
            format!("the VPC's {kind} subnet in {}", self.zones.join(", "))
        }
    }
}
