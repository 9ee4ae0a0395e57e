//! The EC2 side of a native image build: the key pair flow makes for the
//! builder, the builder instance (RunInstances, waited until running,
//! TerminateInstances), CreateImage and its wait, and the image's
//! deregistration with its snapshots.

use std::time::{Duration, Instant};

use aws_sdk_ec2::Client;
use aws_sdk_ec2::types::{
    Filter, Image, ImageState, InstanceStateName, InstanceType, KeyType, ResourceType, Tag,
    TagSpecification,
};
use sha2::{Digest, Sha256};

use crate::aws::{error, tags};
use crate::contract::{ProviderError, Reporter};

/// The tag that marks a builder instance (its value: the step's name).
pub(crate) const BUILDER_TAG: &str = "flow:image-builder";

/// How long a builder or an image may take to reach the state waited for.
const STATE_TIMEOUT: Duration = Duration::from_secs(1800);

/// A short, stable digest of the operation token: the builder's client
/// token and the name of the key pair flow makes for it.
pub(crate) fn token_digest(token: &str) -> String {
    hex::encode(&Sha256::digest(token.as_bytes())[..12])
}

/// The key pair flow makes for a build under `token`.
pub(crate) fn key_pair_name(step: &str, token: &str) -> String {
    let step: String = step
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(40)
        .collect();
    format!("flow-image-{step}-{}", token_digest(token))
}

/// EC2 tags from pairs.
pub(crate) fn ec2_tags<'a>(pairs: impl IntoIterator<Item = (&'a String, &'a String)>) -> Vec<Tag> {
    pairs
        .into_iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

/// Makes the key pair `name` (ed25519); its private key, in OpenSSH form.
pub(crate) async fn create_key_pair(client: &Client, name: &str) -> Result<String, ProviderError> {
    let out = client
        .create_key_pair()
        .key_name(name)
        .key_type(KeyType::Ed25519)
        .send()
        .await
        .map_err(|e| error::refused(&format!("create key pair `{name}`"), e))?;
    out.key_material()
        .map(str::to_string)
        .ok_or_else(|| ProviderError::fatal(format!("EC2 made key pair `{name}` without a key")))
}

/// Deletes the key pair `name`; one already gone is fine.
pub(crate) async fn delete_key_pair(client: &Client, name: &str) -> Result<(), ProviderError> {
    match client.delete_key_pair().key_name(name).send().await {
        Ok(_) => Ok(()),
        Err(e) if error::code(&e) == Some("InvalidKeyPair.NotFound") => Ok(()),
        Err(e) => Err(error::aws(&format!("delete key pair `{name}`"), e)),
    }
}

/// What the builder is launched with.
pub(crate) struct Launch<'a> {
    /// The source AMI.
    pub source_ami: &'a str,
    /// Its instance type.
    pub instance_type: &'a str,
    /// The key pair whose key lets flow in.
    pub key_name: &'a str,
    /// Its subnet, if one is set.
    pub subnet_id: Option<String>,
    /// Its security groups.
    pub security_group_ids: Vec<String>,
    /// The step's name (the builder's tag).
    pub step: &'a str,
    /// The operation token.
    pub token: &'a str,
}

/// A running builder: its id and the addresses it has.
#[derive(Debug, Clone)]
pub(crate) struct Builder {
    /// The instance id.
    pub id: String,
    /// Its private IPv4 address.
    pub private_ip: Option<String>,
    /// Its public IPv4 address, if it has one.
    pub public_ip: Option<String>,
}

/// RunInstances of one builder, then waits until it is running.
pub(crate) async fn launch(
    client: &Client,
    launch: &Launch<'_>,
    reporter: &dyn Reporter,
) -> Result<Builder, ProviderError> {
    let mut tags = tags::with_token(&Default::default(), launch.token);
    tags.insert(BUILDER_TAG.into(), launch.step.into());
    tags.insert(
        "Name".into(),
        format!("flow image builder ({})", launch.step),
    );
    let out = client
        .run_instances()
        .image_id(launch.source_ami)
        .instance_type(InstanceType::from(launch.instance_type))
        .min_count(1)
        .max_count(1)
        .key_name(launch.key_name)
        .set_subnet_id(launch.subnet_id.clone())
        .set_security_group_ids(
            (!launch.security_group_ids.is_empty()).then(|| launch.security_group_ids.clone()),
        )
        .client_token(token_digest(launch.token))
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::Instance)
                .set_tags(Some(ec2_tags(&tags)))
                .build(),
        )
        .send()
        .await
        .map_err(|e| {
            error::refused(&format!("launch a builder from `{}`", launch.source_ami), e)
        })?;
    let id = out
        .instances()
        .first()
        .and_then(|i| i.instance_id())
        .ok_or_else(|| ProviderError::fatal("RunInstances answered without an instance"))?
        .to_string();
    reporter.event(&format!("builder {id} launched from {}", launch.source_ami));
    let started = Instant::now();
    loop {
        let out = client
            .describe_instances()
            .instance_ids(&id)
            .send()
            .await
            .map_err(|e| error::aws(&format!("describe builder {id}"), e))?;
        let instance = out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .next()
            .cloned();
        if let Some(i) = instance {
            match i.state().and_then(|s| s.name()) {
                Some(InstanceStateName::Running) => {
                    return Ok(Builder {
                        id,
                        private_ip: i.private_ip_address().map(str::to_string),
                        public_ip: i.public_ip_address().map(str::to_string),
                    });
                }
                Some(InstanceStateName::Pending) | None => {}
                Some(other) => {
                    return Err(ProviderError::fatal(format!(
                        "builder {id} is {} instead of running",
                        other.as_str()
                    )));
                }
            }
        }
        if started.elapsed() > STATE_TIMEOUT {
            return Err(ProviderError::fatal(format!(
                "builder {id} was not running after {}s",
                STATE_TIMEOUT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The builders a build under `token` launched and that are not
/// terminated yet.
pub(crate) async fn builders_of(
    client: &Client,
    token: &str,
) -> Result<Vec<String>, ProviderError> {
    let out = client
        .describe_instances()
        .filters(
            Filter::builder()
                .name(format!("tag:{}", tags::TOKEN))
                .values(token)
                .build(),
        )
        .filters(
            Filter::builder()
                .name("tag-key")
                .values(BUILDER_TAG)
                .build(),
        )
        .send()
        .await
        .map_err(|e| error::aws("find the builders of this operation", e))?;
    Ok(out
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter(|i| {
            !matches!(
                i.state().and_then(|s| s.name()),
                Some(InstanceStateName::Terminated | InstanceStateName::ShuttingDown)
            )
        })
        .filter_map(|i| i.instance_id().map(str::to_string))
        .collect())
}

/// TerminateInstances of `id`, then waits until it is terminated.
pub(crate) async fn terminate(
    client: &Client,
    id: &str,
    reporter: &dyn Reporter,
) -> Result<(), ProviderError> {
    match client.terminate_instances().instance_ids(id).send().await {
        Ok(_) => {}
        Err(e) if error::code(&e) == Some("InvalidInstanceID.NotFound") => return Ok(()),
        Err(e) => return Err(error::aws(&format!("terminate builder {id}"), e)),
    }
    let started = Instant::now();
    loop {
        let out = client
            .describe_instances()
            .instance_ids(id)
            .send()
            .await
            .map_err(|e| error::aws(&format!("describe builder {id}"), e))?;
        let state = out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .next()
            .and_then(|i| i.state().and_then(|s| s.name()).cloned());
        if matches!(state, None | Some(InstanceStateName::Terminated)) {
            reporter.event(&format!("builder {id} terminated"));
            return Ok(());
        }
        if started.elapsed() > STATE_TIMEOUT {
            return Err(ProviderError::fatal(format!(
                "builder {id} was not terminated after {}s",
                STATE_TIMEOUT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// CreateImage of the builder, tagged, then waits until it is available.
pub(crate) async fn create_image(
    client: &Client,
    builder: &str,
    name: &str,
    description: &str,
    image_tags: &std::collections::BTreeMap<String, String>,
    reporter: &dyn Reporter,
) -> Result<Image, ProviderError> {
    let out = client
        .create_image()
        .instance_id(builder)
        .name(name)
        .description(description)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::Image)
                .set_tags(Some(ec2_tags(image_tags)))
                .build(),
        )
        .send()
        .await
        .map_err(|e| error::refused(&format!("create image `{name}` of {builder}"), e))?;
    let id = out
        .image_id()
        .ok_or_else(|| ProviderError::fatal("CreateImage answered without an image id"))?
        .to_string();
    reporter.event(&format!("image {id} (`{name}`) pending"));
    wait_available(client, &id, reporter).await
}

/// Waits until image `id` is available.
pub(crate) async fn wait_available(
    client: &Client,
    id: &str,
    reporter: &dyn Reporter,
) -> Result<Image, ProviderError> {
    let started = Instant::now();
    loop {
        if let Some(image) = describe(client, id).await? {
            match image.state() {
                Some(ImageState::Available) => {
                    reporter.event(&format!("image {id} available"));
                    return Ok(image);
                }
                Some(ImageState::Pending) | None => {}
                Some(other) => {
                    return Err(ProviderError::fatal(format!(
                        "image {id} is {}: {}",
                        other.as_str(),
                        image
                            .state_reason()
                            .and_then(|r| r.message())
                            .unwrap_or("EC2 gave no reason")
                    )));
                }
            }
        }
        if started.elapsed() > STATE_TIMEOUT {
            return Err(ProviderError::fatal(format!(
                "image {id} was not available after {}s",
                STATE_TIMEOUT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// Image `id`, if it exists (and is not deregistered).
pub(crate) async fn describe(client: &Client, id: &str) -> Result<Option<Image>, ProviderError> {
    match client.describe_images().image_ids(id).send().await {
        Ok(out) => Ok(out
            .images()
            .iter()
            .find(|i| i.state() != Some(&ImageState::Deregistered))
            .cloned()),
        Err(e)
            if matches!(
                error::code(&e),
                Some("InvalidAMIID.NotFound" | "InvalidAMIID.Unavailable")
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(error::aws(&format!("describe image {id}"), e)),
    }
}

/// The image of this account tagged with `token`, if any.
pub(crate) async fn image_of_token(
    client: &Client,
    token: &str,
) -> Result<Option<Image>, ProviderError> {
    let out = client
        .describe_images()
        .owners("self")
        .filters(
            Filter::builder()
                .name(format!("tag:{}", tags::TOKEN))
                .values(token)
                .build(),
        )
        .send()
        .await
        .map_err(|e| error::aws("find the image of this operation", e))?;
    Ok(out.images().first().cloned())
}

/// The snapshots behind an image's block devices.
pub(crate) fn snapshots_of(image: &Image) -> Vec<String> {
    image
        .block_device_mappings()
        .iter()
        .filter_map(|m| m.ebs().and_then(|e| e.snapshot_id()))
        .map(str::to_string)
        .collect()
}

/// DeregisterImage of `id`, then DeleteSnapshot of each of `snapshots`
/// (AWS keeps an image's snapshots when it is deregistered: "Deregister an
/// Amazon EC2 AMI", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/deregister-ami.html).
pub(crate) async fn deregister(
    client: &Client,
    id: &str,
    snapshots: &[String],
    reporter: &dyn Reporter,
) -> Result<(), ProviderError> {
    match client.deregister_image().image_id(id).send().await {
        Ok(_) => reporter.event(&format!("image {id} deregistered")),
        Err(e)
            if matches!(
                error::code(&e),
                Some("InvalidAMIID.NotFound" | "InvalidAMIID.Unavailable")
            ) => {}
        Err(e) => return Err(error::aws(&format!("deregister image {id}"), e)),
    }
    for snapshot in snapshots {
        match client.delete_snapshot().snapshot_id(snapshot).send().await {
            Ok(_) => reporter.event(&format!("snapshot {snapshot} deleted")),
            Err(e) if error::code(&e) == Some("InvalidSnapshot.NotFound") => {}
            Err(e) => return Err(error::aws(&format!("delete snapshot {snapshot}"), e)),
        }
    }
    Ok(())
}
