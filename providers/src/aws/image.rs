//! The `ec2.image` provider: a custom AMI made the way the reference
//! architectures make theirs.
//!
//! Natively (`source_ami` and `playbooks`): a builder instance is launched
//! from the source AMI with a key pair flow makes for the build (or the one
//! the step names, with its private key), flow waits until SSH lets the key
//! in, runs each playbook unmodified with the real `ansible-playbook` on the
//! builder, makes the image (CreateImage), waits until it is `available`,
//! terminates the builder and deletes its key pair. With `packer_template`,
//! the real `packer` CLI builds the template as it is and the AMI id is read
//! from its artifact line; without `packer` installed such a step is
//! refused at validate and at apply.
//!
//! The image carries `flow:token` = the operation token, so that `read`
//! after a crash adopts the image this operation made (and terminates a
//! builder it left). An image cannot change: any input but `tags` (and the
//! SSH key and timeout, which do not shape it), and any edit of a playbook
//! or template (their content digest), replaces it. Destroy deregisters the
//! image and deletes its snapshots.

mod ansible;
mod build;
mod builder;
mod packer;

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_ec2::Client;
use aws_sdk_ec2::types::Image;
use serde_json::{Value, json};

use super::{config, error, inputs, tags};
use crate::contract::{
    Applied, CONTENT_KEY, Change, InputSpec, InputType, InputValue, OpContext, Prior, Problem,
    Provider, ProviderError, ReadOutcome, Refreshed, Schema, StepKind, ValidateContext, Values,
    default_diff, known_inputs,
};

/// The builder's instance type when the step names none.
const DEFAULT_INSTANCE_TYPE: &str = "t3.medium";

/// The builder's login user when the step names none (Amazon Linux's).
const DEFAULT_USER: &str = "ec2-user";

/// How long SSH may take to answer on a new builder, by default.
const DEFAULT_SSH_TIMEOUT_S: i64 = 300;

/// The `ec2.image` provider kind.
#[derive(Debug, Clone)]
pub struct Ec2Image {
    schema: Schema,
}

impl Ec2Image {
    /// The provider with its schema.
    pub fn new() -> Self {
        let s = |name, description| InputSpec::optional(name, InputType::String, description);
        let list = |name, description| {
            InputSpec::optional(
                name,
                InputType::List(Box::new(InputType::String)),
                description,
            )
        };
        let map = |name, description| {
            InputSpec::optional(
                name,
                InputType::Map(Box::new(InputType::String)),
                description,
            )
        };
        Ec2Image {
            schema: Schema {
                kind: StepKind::Resource,
                description: "A custom AMI, built from a source AMI by Ansible playbooks run on a builder instance, or by a Packer template",
                inputs: vec![
                    InputSpec::required("name", InputType::String, "The image's name").forces_new(),
                    s("description", "The image's description").forces_new(),
                    s("source_ami", "The AMI the builder is launched from (native build)").forces_new(),
                    list("playbooks", "Ansible playbooks run in order on the builder, unmodified (native build)").forces_new(),
                    map("extra_vars", "Variables passed to every playbook (`-e`)").forces_new(),
                    s("instance_type", "The builder's instance type (default t3.medium)").forces_new(),
                    s("subnet_id", "The builder's subnet (default: the default VPC's)").forces_new(),
                    list("security_group_ids", "The builder's security groups").forces_new(),
                    s("ssh_user", "The source AMI's login user (default ec2-user)").forces_new(),
                    s("ssh_interface", "Which of the builder's addresses SSH goes to: `public_ip` or `private_ip` (default: public when it has one)").forces_new(),
                    s("key_name", "A key pair to launch the builder with (default: one flow makes for the build and deletes)"),
                    s("ssh_private_key", "The private key of `key_name` (OpenSSH form), e.g. a secret's value").secret(),
                    InputSpec::optional("ssh_timeout", InputType::Integer, "Seconds SSH may take to answer on the builder (default 300)"),
                    s("packer_template", "A Packer template built as it is by the `packer` CLI, instead of a native build").forces_new(),
                    map("packer_vars", "Variables of the Packer template (`-var`)").forces_new(),
                    map("tags", "Tags on the image"),
                ],
                open_inputs: false,
            },
        }
    }
}

impl Default for Ec2Image {
    fn default() -> Self {
        Self::new()
    }
}

/// An EC2 client for `ctx`.
async fn client(ctx: &OpContext) -> Result<(Client, String), ProviderError> {
    let sdk = config::sdk_config(ctx).await?;
    Ok((Client::new(&sdk), config::region(&sdk)))
}

/// The outputs of every image ([`applied`] puts each in).
const OUTPUT_KEYS: [&str; 3] = ["image_id", "name", "snapshot_ids"];

/// The outputs of an image.
fn applied(image: &Image) -> Applied {
    let snapshots = builder::snapshots_of(image);
    let mut outputs = Values::new();
    outputs.insert(
        "image_id".into(),
        json!(image.image_id().unwrap_or_default()),
    );
    outputs.insert("name".into(), json!(image.name().unwrap_or_default()));
    outputs.insert("snapshot_ids".into(), json!(snapshots));
    Applied {
        id: image.image_id().map(str::to_string),
        outputs,
        private: json!({ "snapshot_ids": snapshots }),
    }
}

/// The local files whose content shapes the image: each playbook with the
/// `roles` folder beside it, or the Packer template.
fn shaping_files(values: &Values, workdir: &crate::file_input::Workdir) -> Vec<String> {
    let mut paths: Vec<String> = Vec::new();
    for p in crate::local_digest::paths_of(values, "playbooks") {
        paths.push(p.to_string());
        let parent = std::path::Path::new(p)
            .parent()
            .unwrap_or(std::path::Path::new(""));
        let roles = parent.join("roles").to_string_lossy().into_owned();
        if workdir.resolve(&roles).is_ok_and(|r| r.is_dir()) && !paths.contains(&roles) {
            paths.push(roles);
        }
    }
    paths.extend(
        crate::local_digest::paths_of(values, "packer_template")
            .into_iter()
            .map(str::to_string),
    );
    paths
}

/// The image's tags: the step's, the token.
fn image_tags(values: &Values, token: &str) -> Result<BTreeMap<String, String>, ProviderError> {
    Ok(tags::with_token(&inputs::str_map(values, "tags")?, token))
}

#[async_trait]
impl Provider for Ec2Image {
    fn name(&self) -> &'static str {
        "ec2.image"
    }

    fn uses_aws(&self) -> bool {
        true
    }

    /// Every ec2.image step outputs `image_id`, `name`, `snapshot_ids`.
    fn declared_outputs(
        &self,
        _inputs: &[(String, InputValue)],
        _ctx: &ValidateContext,
    ) -> Option<crate::contract::DeclaredOutputs> {
        Some(crate::contract::DeclaredOutputs::fixed(
            "ec2.image",
            &OUTPUT_KEYS,
        ))
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn validate(&self, inputs: &[(String, InputValue)], ctx: &ValidateContext) -> Vec<Problem> {
        let set = |k: &str| inputs.iter().any(|(n, _)| n == k);
        let known = known_inputs(inputs);
        let mut problems = Vec::new();
        if set("packer_template") {
            for k in ["source_ami", "playbooks"] {
                if set(k) {
                    problems.push(
                        Problem::at(
                            k,
                            format!(
                                "`{k}` is for a native build; this step builds `packer_template`"
                            ),
                        )
                        .with_help("set either `packer_template`, or `source_ami` and `playbooks`"),
                    );
                }
            }
            if !packer::installed() {
                problems
                    .push(Problem::at("packer_template", packer::MISSING).with_help(packer::HELP));
            }
        } else {
            for k in ["source_ami", "playbooks"] {
                if !set(k) {
                    problems.push(
                        Problem::at(k, format!("`{k}` is required for a native build"))
                            .with_help("set `source_ami` and `playbooks`, or `packer_template`"),
                    );
                }
            }
        }
        for (i, p) in crate::local_digest::paths_of(&known, "playbooks")
            .into_iter()
            .enumerate()
        {
            match ctx.workdir.resolve(p) {
                Ok(path) if path.is_file() => {}
                Ok(path) => problems.push(Problem::at_path(
                    &["playbooks", &i.to_string()],
                    format!("playbook `{p}` does not exist ({})", path.display()),
                )),
                Err(e) => problems.push(Problem::at_path(&["playbooks", &i.to_string()], e)),
            }
        }
        if set("ssh_private_key") != set("key_name") {
            problems.push(Problem::at(if set("key_name") { "key_name" } else { "ssh_private_key" }, "`key_name` and `ssh_private_key` go together").with_help("name a key pair and give its private key, or set neither and flow makes a key pair for the build"));
        }
        if let Some(Value::String(i)) = known.get("ssh_interface")
            && i != "public_ip"
            && i != "private_ip"
        {
            problems.push(Problem::at(
                "ssh_interface",
                format!("`{i}` is neither `public_ip` nor `private_ip`"),
            ));
        }
        problems
    }

    fn content_digest(&self, values: &Values, ctx: &ValidateContext) -> Option<String> {
        let paths = shaping_files(values, &ctx.workdir);
        crate::local_digest::files_digest(&ctx.workdir, paths.iter().map(String::as_str))
    }

    /// Any change but the tags, the SSH key and its timeout replaces the
    /// image: an edited playbook too.
    fn diff(&self, prior: &Values, desired: &Values) -> Change {
        match default_diff(&self.schema, prior, desired) {
            Change::Update(mut changed) if changed.iter().any(|k| k == CONTENT_KEY) => {
                changed.retain(|k| k == CONTENT_KEY);
                Change::Replace(changed)
            }
            other => other,
        }
    }

    async fn create(&self, ctx: &OpContext, values: &Values) -> Result<Applied, ProviderError> {
        let (client, region) = client(ctx).await?;
        let image = if values.get("packer_template").is_some_and(|v| !v.is_null()) {
            self.build_with_packer(ctx, &client, &region, values)
                .await?
        } else {
            self.build_natively(ctx, &client, values).await?
        };
        Ok(applied(&image))
    }

    /// Only the tags change in place.
    async fn update(
        &self,
        ctx: &OpContext,
        prior: Prior<'_>,
        values: &Values,
    ) -> Result<Applied, ProviderError> {
        let (client, _) = client(ctx).await?;
        let Some(id) = prior.id else {
            return self.create(ctx, values).await;
        };
        let Some(image) = builder::describe(&client, id).await? else {
            ctx.reporter
                .event(&format!("image {id} no longer exists: building it again"));
            return self.create(ctx, values).await;
        };
        if prior.inputs.get("tags") != values.get("tags") {
            let current: BTreeMap<String, String> = image
                .tags()
                .iter()
                .map(|t| {
                    (
                        t.key().unwrap_or_default().into(),
                        t.value().unwrap_or_default().into(),
                    )
                })
                .collect();
            let mut wanted = inputs::str_map(values, "tags")?;
            if let Some(t) = current.get(tags::TOKEN) {
                wanted.insert(tags::TOKEN.into(), t.clone());
            }
            let (add, remove) = tags::changes(&current, &wanted);
            if !add.is_empty() {
                client
                    .create_tags()
                    .resources(id)
                    .set_tags(Some(builder::ec2_tags(&add)))
                    .send()
                    .await
                    .map_err(|e| error::aws(&format!("tag image {id}"), e))?;
            }
            if !remove.is_empty() {
                let keys = remove
                    .iter()
                    .map(|k| aws_sdk_ec2::types::Tag::builder().key(k).build())
                    .collect();
                client
                    .delete_tags()
                    .resources(id)
                    .set_tags(Some(keys))
                    .send()
                    .await
                    .map_err(|e| error::aws(&format!("untag image {id}"), e))?;
            }
        }
        Ok(applied(&image))
    }

    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        let Some(id) = prior.id else {
            return Ok(());
        };
        let (client, _) = client(ctx).await?;
        let mut snapshots: Vec<String> = prior.private["snapshot_ids"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        if let Some(image) = builder::describe(&client, id).await? {
            for s in builder::snapshots_of(&image) {
                if !snapshots.contains(&s) {
                    snapshots.push(s);
                }
            }
        }
        builder::deregister(&client, id, &snapshots, ctx.reporter.as_ref()).await
    }

    fn can_refresh(&self) -> bool {
        true
    }

    /// Whether the image still exists.
    async fn refresh(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<Refreshed, ProviderError> {
        let Some(id) = prior.id else {
            return Ok(Refreshed::Gone);
        };
        let (client, _) = client(ctx).await?;
        Ok(match builder::describe(&client, id).await? {
            Some(_) => Refreshed::unchanged(),
            None => Refreshed::Gone,
        })
    }

    /// The image carrying this operation's token; when there is none, the
    /// builder and key pair the operation left are removed.
    async fn read(
        &self,
        ctx: &OpContext,
        id: Option<&str>,
        _values: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        let (client, _) = client(ctx).await?;
        let found = match id {
            Some(id) => builder::describe(&client, id).await?,
            None => builder::image_of_token(&client, &ctx.token).await?,
        };
        if let Some(image) = found {
            let id = image.image_id().unwrap_or_default().to_string();
            let image = builder::wait_available(&client, &id, ctx.reporter.as_ref()).await?;
            return Ok(ReadOutcome::Present(applied(&image)));
        }
        for b in builder::builders_of(&client, &ctx.token).await? {
            builder::terminate(&client, &b, ctx.reporter.as_ref()).await?;
        }
        builder::delete_key_pair(&client, &builder::key_pair_name(&ctx.step, &ctx.token)).await?;
        Ok(ReadOutcome::Missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(v: Value) -> Values {
        v.as_object().unwrap().clone()
    }

    /// The keys validate expects are those `applied` puts in.
    #[test]
    fn declared_outputs_are_the_outputs_an_image_has() {
        let ctx = ValidateContext {
            workdir: ".".into(),
        };
        let declared = Ec2Image::new().declared_outputs(&[], &ctx).unwrap();
        let applied = applied(&Image::builder().build());
        let keys: std::collections::BTreeSet<&String> = applied.outputs.keys().collect();
        assert_eq!(keys, declared.keys.iter().collect());
    }

    #[test]
    fn an_edited_playbook_replaces_and_tags_update() {
        let p = Ec2Image::new();
        let prior =
            values(json!({"name": "base", "playbooks": ["a.yml"], CONTENT_KEY: "sha256:1"}));
        let edited =
            values(json!({"name": "base", "playbooks": ["a.yml"], CONTENT_KEY: "sha256:2"}));
        assert_eq!(
            p.diff(&prior, &edited),
            Change::Replace(vec![CONTENT_KEY.into()])
        );
        let tagged = values(
            json!({"name": "base", "playbooks": ["a.yml"], CONTENT_KEY: "sha256:1", "tags": {"a": "b"}}),
        );
        assert_eq!(p.diff(&prior, &tagged), Change::Update(vec!["tags".into()]));
        let other =
            values(json!({"name": "base", "playbooks": ["b.yml"], CONTENT_KEY: "sha256:1"}));
        assert_eq!(
            p.diff(&prior, &other),
            Change::Replace(vec!["playbooks".into()])
        );
    }

    #[test]
    fn the_key_pair_flow_makes_is_named_by_step_and_token() {
        let a = builder::key_pair_name("base image", "tok-1");
        assert!(a.starts_with("flow-image-base-image-"), "{a}");
        assert_eq!(a, builder::key_pair_name("base image", "tok-1"));
        assert_ne!(a, builder::key_pair_name("base image", "tok-2"));
    }
}
