//! Values that try to change a manifest's structure (issue 17): a variable
//! holding `"x\n  hostNetwork: true"`-style text, interpolated into an
//! inline manifest and filled into a file through `values`, is applied as
//! one string each, and the objects on the API server have no key it tried
//! to add.

use crate::support::Project;
use crate::support::kube::KubeServer;

/// What the variable holds: a line break and a key at the data's indent.
const EVIL: &str = "x\n  injected: true";

#[test]
fn values_that_would_add_keys_are_applied_as_one_string() {
    let k = KubeServer::start();
    let p = Project::new();
    p.write(
        "note.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-file\n  namespace: default\ndata:\n  note: ${NOTE}\n",
    );
    p.write(
        "wf.toml",
        &format!(
            r#"[vars.note]
default = {evil}

[steps.inline]
provider = "kube.manifest"
[steps.inline.inputs]
kubeconfig = "{kc}"
manifest = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: inline
  namespace: default
data:
  note: ${{vars.note}}
"""

[steps.file]
provider = "kube.manifest"
[steps.file.inputs]
kubeconfig = "{kc}"
files = ["note.yaml"]
values = {{ NOTE = "${{vars.note}}" }}
"#,
            evil = serde_json::to_string(EVIL).unwrap(),
            kc = k.kubeconfig_path()
        ),
    );
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    for name in ["inline", "from-file"] {
        let cm = k
            .get(&format!("/api/v1/namespaces/default/configmaps/{name}"))
            .unwrap_or_else(|| panic!("configmap {name} was not applied"));
        assert_eq!(
            cm["data"],
            serde_json::json!({"note": EVIL}),
            "{name}: {cm}"
        );
    }
    // Nothing changes on a second look: the rendering is stable.
    p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}
