//! The two ways `ec2.image` builds: natively (a builder, SSH, the
//! playbooks, CreateImage, the builder terminated) and with Packer.

use aws_sdk_ec2::Client;
use aws_sdk_ec2::types::Image;

use super::{DEFAULT_INSTANCE_TYPE, DEFAULT_SSH_TIMEOUT_S, DEFAULT_USER, Ec2Image, image_tags};
use super::{ansible, builder, packer};
use crate::aws::{error, inputs};
use crate::contract::{OpContext, ProviderError, Values};

impl Ec2Image {
    /// The native build: builder, SSH, playbooks, CreateImage, terminate.
    pub(super) async fn build_natively(
        &self,
        ctx: &OpContext,
        client: &Client,
        values: &Values,
    ) -> Result<Image, ProviderError> {
        let name = inputs::req_str(values, "name")?;
        let source_ami = inputs::req_str(values, "source_ami")?;
        let shown = inputs::str_list(values, "playbooks")?;
        let playbooks = shown
            .iter()
            .map(|p| ansible::playbook_path(&ctx.workdir, p))
            .collect::<Result<Vec<_>, _>>()?;
        if which("ansible-playbook").is_none() {
            return Err(ProviderError::invalid(
                "`ansible-playbook` is not installed on the machine flow runs on: a native image build runs the playbooks with it",
            )
            .with_help("install Ansible (Debian: apt-get install ansible)")
            .before_acting());
        }
        let extra_vars = extra_vars_file(values)?;
        let given = inputs::opt_str(values, "key_name")?;
        let (key_name, private_key) = match &given {
            Some(k) => (
                k.clone(),
                inputs::opt_str(values, "ssh_private_key")?.ok_or_else(|| {
                    ProviderError::bad_input("`key_name` needs `ssh_private_key`, its private key")
                        .at_input(["key_name"])
                })?,
            ),
            None => {
                let k = builder::key_pair_name(&ctx.step, &ctx.token);
                builder::delete_key_pair(client, &k).await?;
                let private = builder::create_key_pair(client, &k).await?;
                (k, private)
            }
        };
        let launch = builder::Launch {
            source_ami: &source_ami,
            instance_type: &inputs::opt_str(values, "instance_type")?
                .unwrap_or_else(|| DEFAULT_INSTANCE_TYPE.into()),
            key_name: &key_name,
            subnet_id: inputs::opt_str(values, "subnet_id")?,
            security_group_ids: inputs::str_list(values, "security_group_ids")?,
            step: &ctx.step,
            token: &ctx.token,
        };
        let reporter = ctx.reporter.as_ref();
        let launched = builder::launch(client, &launch, reporter).await;
        let result = match &launched {
            Ok(b) => {
                self.provision(
                    ctx,
                    client,
                    values,
                    b,
                    &key_name,
                    &private_key,
                    &playbooks,
                    &shown,
                    extra_vars.as_ref().map(|f| f.path()),
                )
                .await
            }
            Err(e) => Err(e.clone()),
        };
        // The builder goes whatever happened; so does the key pair flow made.
        let mut cleanup = Ok(());
        if let Ok(b) = &launched {
            cleanup = builder::terminate(client, &b.id, reporter).await;
        }
        if given.is_none() {
            let deleted = builder::delete_key_pair(client, &key_name).await;
            cleanup = cleanup.and(deleted);
        }
        let image = result?;
        cleanup?;
        let _ = name;
        Ok(image)
    }

    /// SSH, the playbooks, CreateImage, on a running builder.
    #[allow(clippy::too_many_arguments)]
    async fn provision(
        &self,
        ctx: &OpContext,
        client: &Client,
        values: &Values,
        b: &builder::Builder,
        key_name: &str,
        private_key: &str,
        playbooks: &[std::path::PathBuf],
        shown: &[String],
        extra_vars: Option<&std::path::Path>,
    ) -> Result<Image, ProviderError> {
        let interface = inputs::opt_str(values, "ssh_interface")?;
        let address = match interface.as_deref() {
            Some("private_ip") => b.private_ip.clone(),
            Some("public_ip") => b.public_ip.clone(),
            _ => b.public_ip.clone().or_else(|| b.private_ip.clone()),
        }
        .ok_or_else(|| {
            ProviderError::fatal(format!(
                "builder {} has no {} address to reach it at",
                b.id,
                interface.as_deref().unwrap_or("IPv4")
            ))
        })?;
        let user = inputs::opt_str(values, "ssh_user")?.unwrap_or_else(|| DEFAULT_USER.into());
        let target = ansible::Target::new(address, user, private_key, key_name)?;
        let timeout = inputs::opt_int(values, "ssh_timeout")?.unwrap_or(DEFAULT_SSH_TIMEOUT_S);
        let reporter = ctx.reporter.as_ref();
        target
            .wait_for_ssh(
                std::time::Duration::from_secs(timeout.max(1) as u64),
                reporter,
            )
            .await?;
        for (path, shown) in playbooks.iter().zip(shown) {
            target
                .run_playbook(path, shown, extra_vars, reporter)
                .await?;
        }
        let name = inputs::req_str(values, "name")?;
        let description = inputs::opt_str(values, "description")?.unwrap_or_else(|| {
            format!(
                "made by flow (step `{}`) from {}",
                ctx.step,
                shown.join(", ")
            )
        });
        builder::create_image(
            client,
            &b.id,
            &name,
            &description,
            &image_tags(values, &ctx.token)?,
            reporter,
        )
        .await
    }

    /// The Packer build, then the token and tags on its image.
    pub(super) async fn build_with_packer(
        &self,
        ctx: &OpContext,
        client: &Client,
        region: &str,
        values: &Values,
    ) -> Result<Image, ProviderError> {
        let shown = inputs::req_str(values, "packer_template")?;
        let template = ctx
            .workdir
            .resolve(&shown)
            .map_err(|e| ProviderError::bad_input(e).at_input(["packer_template"]))?;
        let vars: Vec<(String, String)> = inputs::str_map(values, "packer_vars")?
            .into_iter()
            .collect();
        let reporter = ctx.reporter.as_ref();
        let id = packer::build(&template, &shown, &vars, region, reporter).await?;
        client
            .create_tags()
            .resources(&id)
            .set_tags(Some(builder::ec2_tags(&image_tags(values, &ctx.token)?)))
            .send()
            .await
            .map_err(|e| error::aws(&format!("tag image {id}"), e))?;
        builder::wait_available(client, &id, reporter).await
    }
}

/// `name` on PATH, if it is there.
fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `extra_vars` as a JSON file for `-e @FILE`, if any are set.
fn extra_vars_file(values: &Values) -> Result<Option<tempfile::NamedTempFile>, ProviderError> {
    let vars = inputs::str_map(values, "extra_vars")?;
    if vars.is_empty() {
        return Ok(None);
    }
    let file = tempfile::NamedTempFile::new()
        .map_err(|e| ProviderError::fatal(format!("write extra_vars: {e}")))?;
    serde_json::to_writer(file.as_file(), &vars)
        .map_err(|e| ProviderError::fatal(format!("write extra_vars: {e}")))?;
    Ok(Some(file))
}
