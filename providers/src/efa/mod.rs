//! Elastic Fabric Adapter rules shared by every provider that can start EFA
//! nodes: which instance types take how many EFA interfaces (one data file,
//! providers/data/efa-instance-types.csv, with its source), the launch
//! template's interfaces, and the offline checks of CloudFormation templates.

pub mod cfn;
pub mod launch;
pub mod types;

pub use launch::network_interfaces;
pub use types::{Lookup, interfaces, lookup, type_problem};
