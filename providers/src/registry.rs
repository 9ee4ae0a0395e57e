//! The provider kinds flow knows, by name.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::contract::Provider;
use crate::exec::Exec;
use crate::null::Null;
use crate::suggest;

/// Provider kinds by the name written in `provider = "..."`.
#[derive(Clone, Default)]
pub struct Registry {
    /// The kinds by name.
    providers: BTreeMap<&'static str, Arc<dyn Provider>>,
}

impl Registry {
    /// A registry with no provider kinds.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry with every built-in provider kind: `exec`, `null`, the
    /// AWS kinds (see [`crate::aws`]), EKS, Kubernetes and Slurm.
    pub fn builtin() -> Self {
        let mut registry = Self::new();
        registry.register(Arc::new(Exec::new()));
        registry.register(Arc::new(Null::new()));
        for provider in crate::aws::providers() {
            registry.register(provider);
        }
        for provider in crate::eks::providers()
            .into_iter()
            .chain(crate::kube::providers())
            .chain(crate::parallelcluster::providers())
            .chain(crate::slurm::providers())
        {
            registry.register(provider);
        }
        registry
    }

    /// Adds `provider` under its [`Provider::name`], replacing any kind of that name.
    pub fn register(&mut self, provider: Arc<dyn Provider>) {
        self.providers.insert(provider.name(), provider);
    }

    /// The provider kind called `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Provider>> {
        self.providers.get(name).cloned()
    }

    /// The names of all kinds, sorted.
    pub fn names(&self) -> Vec<&'static str> {
        self.providers.keys().copied().collect()
    }

    /// The known name most likely meant by `name`, for a "did you mean" hint:
    /// one within an edit distance of 2 (case-insensitive), or one that `name`
    /// is a prefix of or that is a prefix of `name`.
    pub fn closest(&self, name: &str) -> Option<&'static str> {
        suggest::closest(name, self.providers.keys().copied())
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("providers", &self.names())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{
        Applied, OpContext, Prior, ProviderError, ReadOutcome, Schema, StepKind, Values,
    };
    use async_trait::async_trait;

    /// A provider kind that only has a name.
    struct Named(&'static str, Schema);

    impl Named {
        fn new(name: &'static str) -> Self {
            Named(
                name,
                Schema {
                    kind: StepKind::Resource,
                    description: "test",
                    inputs: Vec::new(),
                    open_inputs: false,
                },
            )
        }
    }

    #[async_trait]
    impl Provider for Named {
        fn name(&self) -> &'static str {
            self.0
        }
        fn schema(&self) -> &Schema {
            &self.1
        }
        async fn create(&self, _: &OpContext, _: &Values) -> Result<Applied, ProviderError> {
            Ok(Applied::default())
        }
        async fn update(
            &self,
            _: &OpContext,
            _: Prior<'_>,
            _: &Values,
        ) -> Result<Applied, ProviderError> {
            Ok(Applied::default())
        }
        async fn delete(&self, _: &OpContext, _: Prior<'_>) -> Result<(), ProviderError> {
            Ok(())
        }
        async fn read(
            &self,
            _: &OpContext,
            _: Option<&str>,
            _: &Values,
        ) -> Result<ReadOutcome, ProviderError> {
            Ok(ReadOutcome::Missing)
        }
    }

    #[test]
    fn builtin_has_every_kind() {
        let registry = Registry::builtin();
        assert_eq!(
            registry.names(),
            vec![
                "batch.job",
                "batch.node_check",
                "cloudformation.stack",
                "ec2.image",
                "ecr.repository",
                "eks.cluster",
                "eks.nodegroup",
                "exec",
                "fsx.lustre",
                "kube.job",
                "kube.manifest",
                "kube.node_check",
                "null",
                "parallelcluster.cluster",
                "s3.bucket",
                "s3.sync",
                "sagemaker.hyperpod",
                "secretsmanager.secret",
                "slurm.job",
                "slurm.node_check",
            ]
        );
        assert_eq!(registry.get("exec").unwrap().name(), "exec");
        assert_eq!(registry.get("null").unwrap().name(), "null");
        assert!(registry.get("nope").is_none());
    }

    #[test]
    fn register_adds_and_keeps_names_sorted() {
        let mut registry = Registry::new();
        registry.register(Arc::new(Named::new("null")));
        registry.register(Arc::new(Named::new("cloudformation.stack")));
        registry.register(Arc::new(Named::new("aaa")));
        assert_eq!(
            registry.names(),
            vec!["aaa", "cloudformation.stack", "null"]
        );
        assert!(registry.get("cloudformation.stack").is_some());
    }

    #[test]
    fn closest_suggests_a_known_name() {
        let mut registry = Registry::builtin();
        registry.register(Arc::new(Named::new("cloudformation.stack")));
        assert_eq!(registry.closest("nul"), Some("null"));
        assert_eq!(registry.closest("exce"), Some("exec"));
        assert_eq!(
            registry.closest("cloudformation"),
            Some("cloudformation.stack")
        );
        assert_eq!(
            registry.closest("cloudformaton.stack"),
            Some("cloudformation.stack")
        );
        assert_eq!(registry.closest("fsx.lustr"), Some("fsx.lustre"));
        assert_eq!(registry.closest("kube.manifst"), Some("kube.manifest"));
    }
}
