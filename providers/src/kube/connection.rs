//! How the Kubernetes providers reach a cluster.
//!
//! - `kubeconfig` (a file; default `$KUBECONFIG`, else `~/.kube/config`) and
//!   `context` (default: the file's current context), with whatever
//!   authentication the file names (token, client certificate, exec plugin).
//! - `cluster`: an EKS cluster as an `eks.cluster` step outputs it
//!   (`"${steps.eks.outputs.connection}"`: name, endpoint,
//!   certificate_authority, region). The bearer token is presigned from the
//!   AWS credentials of the step's region and profile (see
//!   [`crate::eks_access::token`]) and made anew every ten minutes (tokens last 15).
//!
//! The token goes only to the endpoint DescribeCluster returns for the
//! cluster's name, with the certificate authority it returns: the
//! `endpoint` and `certificate_authority` of the `cluster` input are not
//! trusted with it (state, or a hand-written input, could name any host).
//!
//! Before a client with a fresh token is used, one `GET /version` asks the
//! API server whether it accepts the token: a 401 (a token signed with
//! credentials EKS does not know, expired, for another cluster, altered,
//! or from an identity with no access entry) fails with the cluster's name
//! and how to refresh the credentials, instead of each call's bare
//! `Unauthorized`.
//!
//! `FLOW_EKS_API_SERVER` (a URL) and `FLOW_EKS_API_SERVER_CA` (a PEM file)
//! are an operator's override: they send every `cluster` connection to
//! another API server, keeping the EKS token, for a private endpoint reached
//! through a local tunnel. The URL must name a loopback address; any other
//! is refused.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ::kube::Client;
use ::kube::config::{Config, KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

use crate::contract::{OpContext, Problem, ProviderError, Values};

/// What to check when the kubeconfig cannot be used.
const KUBECONFIG_HELP: &str = "check the kubeconfig (KUBECONFIG or ~/.kube/config) and its current context, \
     or give the step an eks.cluster step's `connection` output";

/// How long a client with an EKS token is used before a fresh token.
const EKS_TOKEN_LIFE: Duration = Duration::from_secs(600);

/// The variable naming an API server for every EKS connection.
pub const API_SERVER_ENV: &str = "FLOW_EKS_API_SERVER";

/// The variable naming the PEM file of that server's certificate authority.
pub const API_SERVER_CA_ENV: &str = "FLOW_EKS_API_SERVER_CA";

/// Which cluster, and how to authenticate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A kubeconfig file (None: the default one) and context (None: current).
    Kubeconfig {
        /// The file.
        path: Option<String>,
        /// The context.
        context: Option<String>,
    },
    /// An EKS cluster with a token from the AWS credentials.
    Eks {
        /// The cluster's name (bound into the token).
        name: String,
        /// The API endpoint (`https://…`).
        endpoint: String,
        /// The base64 PEM of the cluster's certificate authority.
        certificate_authority: String,
        /// The cluster's region, when it differs from the step's.
        region: Option<String>,
    },
}

impl Target {
    /// The target named by a step's inputs.
    pub fn from_inputs(v: &Values) -> Result<Target, ProviderError> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        match v.get("cluster") {
            Some(Value::Object(c)) => {
                let f = |k: &str| {
                    c.get(k).and_then(Value::as_str).map(str::to_string).ok_or_else(|| {
                        ProviderError::fatal(format!(
                            "`cluster.{k}` is missing: pass an eks.cluster step's `connection` output"
                        ))
                    })
                };
                Ok(Target::Eks {
                    name: f("name")?,
                    endpoint: f("endpoint")?,
                    certificate_authority: f("certificate_authority")?,
                    region: c.get("region").and_then(Value::as_str).map(str::to_string),
                })
            }
            _ => Ok(Target::Kubeconfig {
                path: s("kubeconfig"),
                context: s("context"),
            }),
        }
    }

    /// Offline problems with the connection inputs.
    pub fn problems(inputs: &[(String, crate::contract::InputValue)]) -> Vec<Problem> {
        let has = |k: &str| inputs.iter().any(|(n, _)| n == k);
        if has("cluster") && (has("kubeconfig") || has("context")) {
            vec![Problem::at(
                "cluster",
                "give either `cluster` or `kubeconfig`/`context`, not both",
            )]
        } else {
            Vec::new()
        }
    }
}

/// A connection to one cluster, making clients as needed.
pub struct Connection {
    target: Target,
    workdir: PathBuf,
    ctx: OpContext,
    /// Whether the client retries 429, 503 and 504 answers by itself
    /// (kube's default); off where the caller paces retries itself.
    server_retry: bool,
    cached: Mutex<Option<(Instant, Client, Option<String>)>>,
}

/// Where an EKS connection's token went: for the error when it is refused.
struct EksServer {
    /// The cluster's name.
    cluster: String,
    /// The API endpoint the token was sent to.
    endpoint: String,
    /// Where that endpoint came from, with the region.
    source: String,
}

impl Connection {
    /// A connection for a step's inputs.
    pub fn new(ctx: &OpContext, inputs: &Values) -> Result<Self, ProviderError> {
        Ok(Connection {
            target: Target::from_inputs(inputs)?,
            workdir: ctx.workdir.path().to_path_buf(),
            ctx: ctx.clone(),
            server_retry: true,
            cached: Mutex::new(None),
        })
    }

    /// A connection to the EKS cluster `name` in the step's region, through
    /// the endpoint DescribeCluster gives (or the loopback stand-in of
    /// [`API_SERVER_ENV`]).
    pub fn eks(ctx: &OpContext, name: &str) -> Self {
        Connection {
            target: Target::Eks {
                name: name.to_string(),
                endpoint: String::new(),
                certificate_authority: String::new(),
                region: None,
            },
            workdir: ctx.workdir.path().to_path_buf(),
            ctx: ctx.clone(),
            server_retry: true,
            cached: Mutex::new(None),
        }
    }

    /// The same connection, whose client hands 429, 503 and 504 answers
    /// back at once instead of retrying them (an eviction a disruption
    /// budget refuses is a 429 the caller waits on itself).
    pub fn without_server_retry(mut self) -> Self {
        self.server_retry = false;
        self
    }

    /// A client (a fresh one once an EKS token is due).
    pub async fn client(&self) -> Result<Client, ProviderError> {
        if let Some((made, client, _)) = &*self.cached.lock().unwrap_or_else(|e| e.into_inner())
            && (matches!(self.target, Target::Kubeconfig { .. }) || made.elapsed() < EKS_TOKEN_LIFE)
        {
            return Ok(client.clone());
        }
        let (mut config, ns, eks) = self.config().await?;
        config.default_retry &= self.server_retry;
        let client = Client::try_from(config).map_err(|e| {
            ProviderError::fatal(format!("could not make a Kubernetes client: {e}"))
                .with_help(KUBECONFIG_HELP)
        })?;
        if let Some(eks) = eks {
            token_accepted(&client, &eks).await?;
        }
        *self.cached.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Instant::now(), client.clone(), ns));
        Ok(client)
    }

    /// The namespace the kubeconfig context names, if any.
    pub async fn context_namespace(&self) -> Result<Option<String>, ProviderError> {
        self.client().await?;
        Ok(self
            .cached
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|(_, _, ns)| ns.clone()))
    }

    async fn config(&self) -> Result<(Config, Option<String>, Option<EksServer>), ProviderError> {
        match &self.target {
            Target::Kubeconfig { path, context } => {
                let path = resolve(&self.workdir, path.as_deref())?;
                let kc = Kubeconfig::read_from(&path).map_err(|e| {
                    ProviderError::fatal(format!(
                        "could not read kubeconfig {}: {e}",
                        path.display()
                    ))
                    .with_help(KUBECONFIG_HELP)
                })?;
                let options = KubeConfigOptions {
                    context: context.clone(),
                    ..Default::default()
                };
                let wanted = context.clone().or(kc.current_context.clone());
                let ns = kc
                    .contexts
                    .iter()
                    .find(|c| Some(&c.name) == wanted.as_ref())
                    .and_then(|c| c.context.as_ref())
                    .and_then(|c| c.namespace.clone());
                let config = Config::from_custom_kubeconfig(kc, &options)
                    .await
                    .map_err(|e| {
                        ProviderError::fatal(format!("kubeconfig {}: {e}", path.display()))
                            .with_help(KUBECONFIG_HELP)
                    })?;
                Ok((config, ns, None))
            }
            Target::Eks { name, region, .. } => {
                let mut ctx = self.ctx.clone();
                if region.is_some() {
                    ctx.region = region.clone();
                }
                let stand_in = api_server_override()?;
                let sdk = crate::aws::config::sdk_config(&ctx).await?;
                let described = crate::eks_access::endpoint::described(&sdk, name).await?;
                let region_name = sdk
                    .region()
                    .map_or("the configured region".to_string(), |r| r.to_string());
                let source = match stand_in {
                    Some(_) => format!("from {API_SERVER_ENV}"),
                    None => format!("as DescribeCluster gives it in {region_name}"),
                };
                let (endpoint, certificate_authority) = stand_in.unwrap_or(described);
                let token = crate::eks_access::token::eks_token(&sdk, name).await?;
                let kc = eks_kubeconfig(&endpoint, &certificate_authority, &token)?;
                let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                    .await
                    .map_err(|e| ProviderError::fatal(format!("EKS cluster `{name}`: {e}")).with_help(
                        "the cluster's `connection` output names its endpoint and certificate: apply the eks.cluster step first, and check that the cluster is ACTIVE",
                    ))?;
                let server = EksServer {
                    cluster: name.clone(),
                    endpoint,
                    source,
                };
                Ok((config, None, Some(server)))
            }
        }
    }
}

/// The kubeconfig file to read: `path` relative to `workdir` (`~` expanded),
/// else `$KUBECONFIG` (its first entry), else `~/.kube/config`.
fn resolve(workdir: &Path, path: Option<&str>) -> Result<PathBuf, ProviderError> {
    let home = || {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
    };
    let expand = |p: &str| match p.strip_prefix("~/") {
        Some(rest) => home().join(rest),
        None => workdir.join(p),
    };
    if let Some(p) = path {
        return Ok(expand(p));
    }
    if let Some(env) = std::env::var_os("KUBECONFIG")
        && let Some(first) = std::env::split_paths(&env).next()
        && !first.as_os_str().is_empty()
    {
        return Ok(first);
    }
    Ok(home().join(".kube/config"))
}

/// Whether the EKS API server accepts the token `client` carries: one
/// `GET /version`. A 401 is the cluster refusing the token; any other
/// answer shows it authenticated (the calls themselves report what else is
/// wrong); no answer at all is the cluster out of reach.
async fn token_accepted(client: &Client, eks: &EksServer) -> Result<(), ProviderError> {
    match client.apiserver_version().await {
        Ok(_) => Ok(()),
        Err(::kube::Error::Api(s)) if s.code == 401 => Err(refused(eks)),
        Err(::kube::Error::Api(_)) => Ok(()),
        Err(e) => Err(super::errors::kube(
            &format!("reach EKS cluster `{}` at {}", eks.cluster, eks.endpoint),
            e,
        )),
    }
}

/// The error for an EKS API server that answered 401 to flow's token.
fn refused(eks: &EksServer) -> ProviderError {
    let EksServer {
        cluster,
        endpoint,
        source,
    } = eks;
    ProviderError::auth(format!(
        "EKS cluster `{cluster}` refused flow's token: its API server {endpoint} ({source}) answered 401 Unauthorized"
    ))
    .with_help(format!(
        "the token is signed for `{cluster}` with the AWS credentials flow runs with, and is good for 15 minutes \
         from this machine's clock: refresh the credentials (`aws sso login`, `aws configure`, or new \
         AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN; `aws sts get-caller-identity` shows \
         who they are), check the clock, and check that this identity has an access entry on the cluster \
         (`aws eks list-access-entries --cluster-name {cluster}`); then run `flow apply` again"
    ))
}

/// The endpoint and base64 CA that [`API_SERVER_ENV`] and
/// [`API_SERVER_CA_ENV`] put in place of an EKS cluster's, if set (and
/// loopback: see [`loopback_host`]).
fn api_server_override() -> Result<Option<(String, String)>, ProviderError> {
    let Some(url) = std::env::var(API_SERVER_ENV).ok().filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    if !loopback_host(&url) {
        return Err(ProviderError::bad_input(format!(
            "{API_SERVER_ENV}={url} is not a loopback address: flow sends an EKS token only to the cluster's own endpoint, or to a stand-in on this machine"
        ))
        .with_help(format!(
            "unset {API_SERVER_ENV} to reach the cluster at the endpoint EKS describes; for a private endpoint, tunnel it to a local port and name https://127.0.0.1:PORT"
        )));
    }
    let ca = match std::env::var_os(API_SERVER_CA_ENV) {
        Some(path) => {
            let pem = std::fs::read(&path).map_err(|e| {
                ProviderError::fatal(format!(
                    "{API_SERVER_CA_ENV}: could not read {}: {e}",
                    Path::new(&path).display()
                ))
            })?;
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, pem)
        }
        None => {
            return Err(ProviderError::fatal(format!(
                "{API_SERVER_ENV} is set: set {API_SERVER_CA_ENV} to the PEM file of its certificate authority too"
            )));
        }
    };
    Ok(Some((url, ca)))
}

/// Whether `url`'s host is this machine: `localhost`, or an address in
/// 127.0.0.0/8 or `::1`. Anything unparsable is not.
fn loopback_host(url: &str) -> bool {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return false;
    };
    let Some(host) = uri.host() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A one-cluster kubeconfig for an EKS endpoint and token.
fn eks_kubeconfig(endpoint: &str, ca: &str, token: &str) -> Result<Kubeconfig, ProviderError> {
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "eks", "cluster": {"server": endpoint, "certificate-authority-data": ca}}],
        "users": [{"name": "eks", "user": {"token": token}}],
        "contexts": [{"name": "eks", "context": {"cluster": "eks", "user": "eks"}}],
        "current-context": "eks",
    });
    Kubeconfig::from_yaml(&doc.to_string())
        .map_err(|e| ProviderError::fatal(format!("could not build the EKS kubeconfig: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;

    #[test]
    fn target_from_inputs() {
        let t = Target::from_inputs(&values(json!({"kubeconfig": "kc.yaml", "context": "dev"})))
            .unwrap();
        assert_eq!(
            t,
            Target::Kubeconfig {
                path: Some("kc.yaml".into()),
                context: Some("dev".into())
            }
        );
        let t = Target::from_inputs(&values(json!({"cluster": {
            "name": "dlc", "endpoint": "https://x", "certificate_authority": "Q0E=", "region": "us-west-2"
        }})))
        .unwrap();
        assert!(matches!(t, Target::Eks { ref name, .. } if name == "dlc"));
        let err = Target::from_inputs(&values(json!({"cluster": {"name": "dlc"}}))).unwrap_err();
        assert!(err.message.contains("cluster.endpoint"), "{}", err.message);
    }

    #[test]
    fn relative_kubeconfig_is_in_the_workflow_folder() {
        let p = resolve(Path::new("/w"), Some("kc.yaml")).unwrap();
        assert_eq!(p, PathBuf::from("/w/kc.yaml"));
        let p = resolve(Path::new("/w"), Some("/abs/kc")).unwrap();
        assert_eq!(p, PathBuf::from("/abs/kc"));
    }

    #[test]
    fn only_loopback_hosts_stand_in_for_eks() {
        for ok in [
            "https://127.0.0.1:6443",
            "https://127.8.9.10",
            "https://localhost:1",
            "https://[::1]:6443",
            "http://LOCALHOST",
        ] {
            assert!(loopback_host(ok), "{ok}");
        }
        for refused in [
            "https://10.0.0.1:6443",
            "https://evil.example",
            "https://127.0.0.1.evil.example",
            "https://localhost.evil.example",
            "https://[::2]",
            "not a url",
            "/just/a/path",
        ] {
            assert!(!loopback_host(refused), "{refused}");
        }
    }

    #[test]
    fn a_refused_token_names_the_cluster_and_the_fix() {
        let e = refused(&EksServer {
            cluster: "dlc".into(),
            endpoint: "https://127.0.0.1:6443".into(),
            source: "as DescribeCluster gives it in us-east-1".into(),
        });
        assert_eq!(e.kind, crate::contract::ErrorKind::Auth);
        assert_eq!(
            e.message,
            "EKS cluster `dlc` refused flow's token: its API server https://127.0.0.1:6443 (as DescribeCluster gives it in us-east-1) answered 401 Unauthorized"
        );
        let help = e.help.unwrap();
        for part in [
            "refresh the credentials",
            "aws sso login",
            "clock",
            "--cluster-name dlc",
        ] {
            assert!(help.contains(part), "{part}: {help}");
        }
    }

    #[test]
    fn eks_kubeconfig_carries_the_token() {
        let kc = eks_kubeconfig("https://e.eks", "Q0E=", "k8s-aws-v1.abc").unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("eks"));
        assert_eq!(
            kc.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
            Some("https://e.eks")
        );
    }
}
