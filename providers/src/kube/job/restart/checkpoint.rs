//! The newest checkpoint of `checkpoint_dir`, found where the training
//! keeps it: a short batch Job that mounts the training's volumes (its
//! first pod template's `volumes`, its first container's `volumeMounts`),
//! runs the training's image where the training may run (the template's
//! `nodeSelector`, `affinity`, `tolerations`, service account and pull
//! secrets) and lists the folder as `slurm.job` lists it (`find DIR
//! -mindepth 1 -maxdepth 1 -printf '%T@ %p\n'`). Its newest entry by
//! modification time ([`crate::fleet::suspects::newest`]) is what the next
//! attempt is told as `FLOW_RESUME_FROM`; an empty folder, or a listing
//! that fails (no such folder), starts it from the beginning.

use serde_json::{Value, json};

use crate::kube::node_check::for_job;
use crate::kube::render::Doc;

/// The most characters of a Job's name.
const NAME_MAX: usize = 63;

/// The listing Job of attempt `n`'s checkpoint, for a training `base`.
pub(crate) fn lister(base: &Doc, dir: &str, n: u32, token: &str, step: &str) -> Option<Doc> {
    let mut copy = base.object.clone();
    let template = for_job::pod_templates(&mut copy)
        .into_iter()
        .next()?
        .clone();
    let spec = &template["spec"];
    let container = spec.pointer("/containers/0")?;
    let suffix = format!("-ckpt-a{n}");
    let keep = NAME_MAX.saturating_sub(suffix.len());
    let stem: String = base.name().chars().take(keep).collect();
    let mut pod = json!({
        "restartPolicy": "Never",
        "containers": [{
            "name": "list",
            "image": container["image"],
            "command": ["find", dir, "-mindepth", "1", "-maxdepth", "1", "-printf", "%T@ %p\\n"],
        }],
    });
    if let Some(mounts) = container.get("volumeMounts") {
        pod["containers"][0]["volumeMounts"] = mounts.clone();
    }
    for key in [
        "volumes",
        "nodeSelector",
        "affinity",
        "tolerations",
        "serviceAccountName",
        "imagePullSecrets",
    ] {
        if let Some(v) = spec.get(key) {
            pod[key] = v.clone();
        }
    }
    let mut meta = json!({"name": format!("{}{suffix}", stem.trim_end_matches('-'))});
    meta["annotations"][crate::kube::TOKEN_ANNOTATION] = json!(token);
    meta["annotations"][super::super::STEP_ANNOTATION] = json!(step);
    if let Some(ns) = base.object["metadata"].get("namespace") {
        meta["namespace"] = ns.clone();
    }
    Some(Doc {
        source: base.source.clone(),
        object: json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": meta,
            "spec": {"backoffLimit": 0, "template": {"spec": pod}},
        }),
    })
}

/// Whether `doc`'s first container mounts anything `dir` is under.
pub(crate) fn mounted(base: &Doc, dir: &str) -> bool {
    let mut copy = base.object.clone();
    let Some(t) = for_job::pod_templates(&mut copy).into_iter().next() else {
        return false;
    };
    t.pointer("/spec/containers/0/volumeMounts")
        .and_then(Value::as_array)
        .is_some_and(|m| {
            m.iter().filter_map(|m| m["mountPath"].as_str()).any(|p| {
                let p = p.trim_end_matches('/');
                dir == p || dir.starts_with(&format!("{p}/"))
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lister_mounts_the_trainings_volumes_and_lists_the_folder() {
        let base = Doc {
            source: "t#1".into(),
            object: json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "metadata": {"name": "train", "namespace": "ml"},
                "spec": {"pytorchReplicaSpecs": {"Master": {"template": {"spec": {
                    "nodeSelector": {"pool": "gpu"},
                    "volumes": [{"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx"}}],
                    "containers": [{"name": "pytorch", "image": "train:1",
                        "volumeMounts": [{"name": "fsx", "mountPath": "/fsx"}]}]}}}}}}),
        };
        let d = lister(&base, "/fsx/ckpt", 2, "tok-ckpt-a2", "train").unwrap();
        assert_eq!(d.name(), "train-ckpt-a2");
        let pod = &d.object["spec"]["template"]["spec"];
        assert_eq!(
            pod["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "fsx"
        );
        assert_eq!(pod["nodeSelector"]["pool"], "gpu");
        assert_eq!(pod["containers"][0]["image"], "train:1");
        assert_eq!(pod["containers"][0]["command"][1], "/fsx/ckpt");
        assert_eq!(pod["containers"][0]["volumeMounts"][0]["mountPath"], "/fsx");
        assert_eq!(d.object["metadata"]["namespace"], "ml");
        assert!(mounted(&base, "/fsx/ckpt"));
        assert!(mounted(&base, "/fsx"));
        assert!(!mounted(&base, "/fsxother"));
        assert!(!mounted(&base, "/data"));
    }
}
