//! How flow reaches an EKS cluster's Kubernetes API: the endpoint and
//! certificate authority DescribeCluster gives (`endpoint`), and a bearer
//! token presigned from the AWS credentials (`token`). Used by the
//! Kubernetes providers' connections and by `eks.nodegroup`'s drain; it
//! needs only the AWS pieces, so both can use it.

pub mod endpoint;
pub mod token;
